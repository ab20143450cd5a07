"""Integration fixtures: the scripted fake engine on a real socket, and settings pointing at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ocr_ui.config import Settings
from tests.support.fake_engine import FakeEngine, settings_for


@pytest.fixture
def fake_engine() -> Iterator[FakeEngine]:
    """A fresh fake engine per test, stopped afterwards (its thread and socket with it)."""
    with FakeEngine() as engine:
        yield engine


@pytest.fixture
def engine_settings(fake_engine: FakeEngine) -> Settings:
    """Settings aimed at the fake engine with short timeouts and no retries (fast, deterministic faults)."""
    return settings_for(fake_engine, client={"idle_timeout_s": 2, "total_timeout_s": 20, "max_retries": 0})
