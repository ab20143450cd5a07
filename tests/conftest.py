"""Shared pytest setup: async tests run on asyncio through anyio's plugin; GPU tests are opt-in."""

from __future__ import annotations

import pytest

# The real engine's session fixtures, shared by tests/e2e and tests/browser: one plugin, one engine.
pytest_plugins = ["tests.support.engine_fixtures"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-gpu", action="store_true", default=False, help="run tests that need an NVIDIA GPU")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Browser tests last: they hold a Playwright event loop on the main thread while they run.
    items.sort(key=lambda item: "tests/browser/" in str(item.fspath).replace("\\", "/"))
    if config.getoption("--run-gpu"):
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU: pass --run-gpu on the GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
