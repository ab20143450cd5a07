"""Admission control reading the fake engine's real /metrics over a socket (the default HTTP fetcher)."""

from __future__ import annotations

import asyncio

import pytest

from ocr_ui.admission import Admission
from ocr_ui.errors import EngineBusy
from tests.support.fake_engine import FakeEngine, settings_for

pytestmark = pytest.mark.anyio


async def test_admission_holds_pages_while_the_engine_reports_a_long_queue(fake_engine: FakeEngine) -> None:
    settings = settings_for(fake_engine, admission={"max_waiting": 4, "hold_timeout_s": 0.3, "poll_interval_s": 0.05})
    adm = Admission(settings)
    await adm.start()
    try:
        fake_engine.set_metrics(num_requests_waiting=12, num_requests_running=16, kv_cache_usage_perc=0.5)
        await adm.sample()
        assert adm.snapshot()["engine_waiting"] == 12
        with pytest.raises(EngineBusy, match="12 pages queued"):
            async with adm.admit(900):
                pass

        async def drain() -> None:
            await asyncio.sleep(0.1)
            fake_engine.set_metrics(num_requests_waiting=0)

        task = asyncio.create_task(drain())
        adm.cfg = adm.cfg.model_copy(update={"hold_timeout_s": 10.0})
        async with adm.admit(900) as decision:  # the background sampler sees the drain and lets it go
            assert decision.waited_s > 0
        await task
    finally:
        await adm.stop()


async def test_an_engine_that_is_down_leaves_pages_admitted_and_the_reason_visible(fake_engine: FakeEngine) -> None:
    adm = Admission(settings_for(fake_engine))
    fake_engine.down()
    await adm.sample()
    async with adm.admit(900) as decision:
        assert not decision.degraded
    assert adm.snapshot()["metrics_error"] is not None and adm.snapshot()["engine_waiting"] is None


async def test_the_metrics_poll_keeps_one_client_across_samples(fake_engine: FakeEngine,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # A client per poll built a new TLS context each time: ~19 ms of CPU on the event loop every second.
    import httpx2

    made: list[object] = []
    real = httpx2.AsyncClient

    def counting(*args: object, **kwargs: object) -> httpx2.AsyncClient:
        client = real(*args, **kwargs)  # type: ignore[arg-type]
        made.append(client)
        return client

    monkeypatch.setattr(httpx2, "AsyncClient", counting)
    adm = Admission(settings_for(fake_engine))
    for running in (3, 7, 11):
        fake_engine.set_metrics(num_requests_running=running)
        assert (await adm.sample()) is not None
        assert adm.snapshot()["engine_running"] == running
    assert len(made) == 1
    fake_engine.down()  # a dropped connection is one unknown sample, then the same client reconnects
    assert await adm.sample() is None
    fake_engine.up()
    fake_engine.set_metrics(num_requests_running=2)
    assert (await adm.sample()) is not None and adm.snapshot()["engine_running"] == 2
    assert len(made) == 1
    await adm.stop()
    assert made[0].is_closed  # type: ignore[attr-defined]
