"""The service with the real admission controller, circuit breaker and Prometheus metrics wired in."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from ocr_ui.admission import Admission
from ocr_ui.client import EngineClient
from ocr_ui.metrics import Metrics
from ocr_ui.service import OcrRequest, OcrService
from tests.integration.test_service import pdf_bytes, png_bytes
from tests.support.fake_engine import FakeEngine, Reply, settings_for

pytestmark = pytest.mark.anyio


def sample_value(metrics: Metrics, name: str, labels: dict[str, str] | None = None) -> float:
    value = metrics.registry.get_sample_value(name, labels or {})
    return 0.0 if value is None else value


async def test_an_open_circuit_stops_the_job_and_fails_the_remaining_pages(fake_engine: FakeEngine) -> None:
    settings = settings_for(fake_engine, client={"max_retries": 0}, admission={"breaker_failures": 1})
    client = EngineClient(settings)
    service = OcrService(settings, client, admission=Admission(settings))
    fake_engine.push(Reply(status=500))
    try:
        final = await service.run_to_end(OcrRequest(data=pdf_bytes([(300, 300)] * 3), preset="text"))
    finally:
        await client.close()
    assert [p.error_code for p in final.pages] == ["engine_error", "circuit_open", "circuit_open"]
    assert final.pages[1].error == final.pages[2].error
    assert len(fake_engine.requests) == 1  # the open circuit kept pages 2 and 3 away from the engine


async def test_sustained_pressure_degrades_the_page_size_and_max_tokens(fake_engine: FakeEngine) -> None:
    settings = settings_for(fake_engine, client={"max_retries": 0},
                            admission={"max_waiting": 10, "degrade_max_side": 256, "degrade_max_tokens": 777})
    fake_engine.set_metrics(num_requests_waiting=6)  # above half of max_waiting: "near the limit"
    admission = Admission(settings)
    for _ in range(3):  # the sampler's job, done by hand: three samples in a row near the limit
        await admission.sample()
    client = EngineClient(settings)
    try:
        final = await OcrService(settings, client, admission=admission).run_to_end(
            OcrRequest(data=png_bytes(1600, 1200), preset="text"))
    finally:
        await client.close()
    page = final.pages[0]
    assert page.status == "done" and page.degraded
    assert max(page.width, page.height) <= 256
    assert fake_engine.requests[-1]["max_tokens"] == 777


async def test_pages_are_counted_in_the_app_metrics(fake_engine: FakeEngine) -> None:
    settings = settings_for(fake_engine, client={"max_retries": 0})
    metrics = Metrics(CollectorRegistry(), nvml=False)
    client = EngineClient(settings, metrics=metrics)
    service = OcrService(settings, client, metrics=metrics)
    fake_engine.push(Reply(chunks=["a", "b", "c"]), Reply(status=503))
    try:
        await service.run_to_end(OcrRequest(data=pdf_bytes([(300, 300)] * 2), preset="text"))
        assert (await service.health())["engine"]["up"]
    finally:
        await client.close()
    assert sample_value(metrics, "ocr_ui_pages_total", {"outcome": "ok"}) == 1
    assert sample_value(metrics, "ocr_ui_pages_total", {"outcome": "busy"}) == 1
    assert sample_value(metrics, "ocr_ui_requests_total", {"preset": "text", "outcome": "ok"}) == 1
    assert sample_value(metrics, "ocr_ui_output_tokens_total", {"preset": "text"}) == 3
    assert sample_value(metrics, "ocr_ui_time_to_first_token_seconds_count") == 1
    assert sample_value(metrics, "ocr_ui_queue_wait_seconds_count") == 2
    assert sample_value(metrics, "ocr_ui_in_flight_requests") == 0
    assert sample_value(metrics, "ocr_ui_engine_up") == 1


async def test_a_stopped_page_is_counted_as_stopped(fake_engine: FakeEngine) -> None:
    settings = settings_for(fake_engine, client={"max_retries": 0})
    metrics = Metrics(CollectorRegistry(), nvml=False)
    client = EngineClient(settings, metrics=metrics)
    fake_engine.push(Reply(chunks=["x"] * 300, token_delay=0.01))
    updates = OcrService(settings, client, metrics=metrics).run(OcrRequest(data=png_bytes(), preset="text"))
    try:
        async for update in updates:
            if update.pages[0].text:
                break
        await updates.aclose()
    finally:
        await client.close()
    assert sample_value(metrics, "ocr_ui_pages_total", {"outcome": "stopped"}) == 1
    assert sample_value(metrics, "ocr_ui_in_flight_requests") == 0
