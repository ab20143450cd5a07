"""A browser upload against the real CPU vLLM engine (the tiny random checkpoint): the tokens stream in.

The tiny model's text is gibberish, and some prompts decode to nothing; the 1.0 profile's English
prompt with ``ignore_eos`` always yields ``max_tokens`` visible tokens, so the growth can be watched.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.conftest import RAW_JS, raw_value, shot, show_tab, statuses, synthetic_page, upload
from tests.support.engine_fixtures import Server, e2e_settings
from tests.support.live_app import LiveApp

pytestmark = [pytest.mark.browser, pytest.mark.e2e]
WAIT_MS = 120_000


@pytest.fixture(scope="module")
def real_live(vllm_server: Server, tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveApp]:
    logs = tmp_path_factory.mktemp("real-logs")
    settings = e2e_settings(tiny_checkpoint, vllm_server.settings.engine.port, model__profile="hunyuanocr-1.0",
                            model__served_name=vllm_server.settings.model.served_name,
                            generation__ignore_eos="true", generation__max_tokens_cap="2000", app__stream_flush_s="0",
                            app__log_dir=str(logs))
    # The tiny model decodes fast: a long answer and a redraw per chunk (stream_flush_s 0) leave the
    # browser several partial states to see.
    with LiveApp(settings) as app:
        yield app


@pytest.fixture
def real_page(browser: object, real_live: LiveApp) -> Iterator[object]:
    context = browser.new_context(locale="en-US", viewport={"width": 1400, "height": 1000})  # type: ignore[attr-defined]
    tab = context.new_page()
    tab.goto(real_live.url + "/")
    tab.wait_for_selector("#ocr-run")
    yield tab
    context.close()


def test_a_browser_upload_streams_tokens_from_the_real_server(real_page, tmp_path: Path) -> None:
    page = real_page
    page.wait_for_selector("#ocr-engine :text('🟢')", timeout=WAIT_MS)  # the badge saw the engine
    upload(page, synthetic_page(tmp_path / "real.png"))
    show_tab(page, "Raw text")
    page.click("#ocr-run")
    seen: list[str] = []
    deadline = time.monotonic() + WAIT_MS / 1000
    while statuses(page) != ["done"]:
        assert time.monotonic() < deadline, f"timed out; statuses {statuses(page)}, seen {seen[-3:]}"
        value = raw_value(page)
        if value and (not seen or seen[-1] != value):
            seen.append(value)
        time.sleep(0.02)
    page.wait_for_function(f"{RAW_JS}.length > 0", timeout=WAIT_MS)
    final = raw_value(page)
    partial = [v for v in seen if v != final]
    assert len(partial) >= 2, seen  # the real server's tokens arrived in at least two visible steps
    assert all(final.startswith(v) for v in partial), "each step only added text"
    assert "1 of 1 pages finished" in page.inner_text("#ocr-progress")
    shot(page, "11-real-engine")
