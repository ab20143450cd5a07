"""Queue feedback with one run at a time and one waiting place: the second page sees its queue position,
the third gets Gradio's own "busy, try again" message instead of an endless wait."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.conftest import synthetic_page, upload
from tests.integration.conftest import settings_for
from tests.support.fake_engine import FakeEngine, Reply, split_text
from tests.support.live_app import LiveApp

WAIT_MS = 30_000


@pytest.fixture(scope="module")
def narrow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveApp, FakeEngine]]:
    with FakeEngine() as fake:
        # The first token is slow, so the first run still holds the only slot while the others arrive.
        fake.responder = lambda body: Reply(chunks=split_text("slow text", 4), first_token_delay=20, token_delay=0.1)
        settings = settings_for(fake, app={"log_dir": str(tmp_path_factory.mktemp("logs")), "queue_concurrency": 1,
                                           "queue_max_size": 1},
                                client={"idle_timeout_s": 40, "total_timeout_s": 90, "max_retries": 0})
        with LiveApp(settings) as app:
            yield app, fake


def test_a_waiting_run_shows_its_queue_place_and_a_full_queue_says_busy(browser, narrow, tmp_path: Path) -> None:
    live, fake = narrow
    image = synthetic_page(tmp_path / "queued.png")
    context = browser.new_context(locale="en-US", viewport={"width": 1400, "height": 1000})
    try:
        tabs = []
        for _ in range(3):
            tab = context.new_page()
            tab.goto(live.url + "/")
            tab.wait_for_selector("#ocr-run")
            upload(tab, image)
            tabs.append(tab)
        first, second, third = tabs
        first.click("#ocr-run")
        first.wait_for_selector("#ocr-progress .ocr-chip[data-status=running]", timeout=WAIT_MS)
        assert fake.wait_until(lambda: fake.in_flight >= 1, timeout=15), "the first run never reached the engine"
        second.click("#ocr-run")
        second.wait_for_selector("#ocr-progress :text('queue: 1/1')", timeout=WAIT_MS)  # Gradio's place in line
        third.click("#ocr-run")
        busy = third.get_by_text("currently busy", exact=False).first
        busy.wait_for(timeout=WAIT_MS)
        assert second.locator("#ocr-progress :text('queue: 1/1')").count() >= 1  # still waiting, not refused
    finally:
        context.close()

