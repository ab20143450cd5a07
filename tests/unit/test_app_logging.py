"""The app's logging setup: its own lines at the configured level, the HTTP client's only at debug."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from app import configure_logging
from ocr_ui.config import load_config

NAMES = ("httpx2", "httpcore2", "httpx", "httpcore")


@pytest.fixture(autouse=True)
def _restore_levels() -> Iterator[None]:
    before = {name: logging.getLogger(name).level for name in NAMES}
    yield
    for name, level in before.items():
        logging.getLogger(name).setLevel(level)


def test_per_call_http_lines_are_quiet_unless_debugging() -> None:
    configure_logging(load_config(None, {"OCR_UI__APP__LOG_LEVEL": "info"}))
    assert all(logging.getLogger(name).getEffectiveLevel() == logging.WARNING for name in NAMES)
    assert not logging.getLogger("httpx2").isEnabledFor(logging.INFO)
    configure_logging(load_config(None, {"OCR_UI__APP__LOG_LEVEL": "debug"}))
    assert logging.getLogger("httpx2").isEnabledFor(logging.DEBUG)
