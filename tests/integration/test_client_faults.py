"""Every engine fault becomes its own BackendError subclass with a clear, safe message."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from ocr_ui.client import EngineClient
from ocr_ui.config import Settings
from ocr_ui.errors import (
    BackendError,
    EngineBusy,
    EngineRejected,
    EngineTimeout,
    EngineUnavailable,
    StreamBroken,
)
from tests.integration.test_client import EXTRA, SAMPLING, messages
from tests.support.fake_engine import FakeEngine, Reply, settings_for

pytestmark = pytest.mark.anyio


@pytest.fixture
async def client(engine_settings: Settings) -> AsyncIterator[EngineClient]:
    engine = EngineClient(engine_settings)
    yield engine
    await engine.close()


async def run_until_error(client: EngineClient) -> tuple[str, BackendError]:
    """Stream until the client raises; return the text that arrived before and the error."""
    received = []
    with pytest.raises(BackendError) as info:
        stream = client.stream(messages(), max_tokens=64, sampling=SAMPLING, extra_body=EXTRA, request_id="f")
        async with contextlib.aclosing(stream) as chunks:
            async for chunk in chunks:
                received.append(chunk.text)
    return "".join(received), info.value


async def test_an_engine_that_is_down_is_engine_unavailable(fake_engine: FakeEngine, client: EngineClient) -> None:
    fake_engine.down()
    text, error = await run_until_error(client)
    assert type(error) is EngineUnavailable and text == ""
    assert "not reachable" in str(error)


async def test_a_context_overflow_400_says_the_page_is_too_large(fake_engine: FakeEngine, client: EngineClient) -> None:
    fake_engine.push(Reply(status=400, param="input_tokens", message=(
        "This model's maximum context length is 8192 tokens. However, you requested 4096 output tokens and "
        "your prompt contains 6000 input tokens, /srv/models/secret/path")))
    _, error = await run_until_error(client)
    assert type(error) is EngineRejected
    assert "too large for the engine's context" in str(error) and "images.max_side" in str(error)
    assert "/srv" not in str(error)


async def test_another_400_names_only_the_parameter_and_never_the_engine_text(
        fake_engine: FakeEngine, client: EngineClient) -> None:
    fake_engine.push(Reply(status=400, param="top_k", message="top_k must be -1 or > 0 at /opt/vllm/sampling.py"))
    _, error = await run_until_error(client)
    assert type(error) is EngineRejected
    assert str(error) == "The OCR engine rejected the request as invalid (parameter 'top_k')."


async def test_a_wrong_api_key_is_rejected_with_a_hint_at_the_setting() -> None:
    with FakeEngine(api_key="right") as fe:
        client = EngineClient(settings_for(fe, engine={"api_key": "wrong"}, client={"max_retries": 0}))
        try:
            _, error = await run_until_error(client)
        finally:
            await client.close()
    assert type(error) is EngineRejected
    assert "engine.api_key" in str(error) and "wrong" not in str(error)


async def test_an_unknown_model_is_rejected_naming_the_served_name() -> None:
    with FakeEngine(served_name="someone/else") as fe:
        client = EngineClient(settings_for(fe, client={"max_retries": 0}))
        try:
            _, error = await run_until_error(client)
        finally:
            await client.close()
    assert type(error) is EngineRejected
    assert "'tencent/HunyuanOCR'" in str(error) and "model.served_name" in str(error)


async def test_a_500_is_a_plain_backend_error(fake_engine: FakeEngine, client: EngineClient) -> None:
    fake_engine.push(Reply(status=500, message="Traceback (most recent call last): ..."))
    _, error = await run_until_error(client)
    assert type(error) is BackendError
    assert "HTTP 500" in str(error) and "Traceback" not in str(error)


async def test_a_502_from_a_router_means_the_engine_is_unreachable(fake_engine: FakeEngine, client: EngineClient) -> None:
    fake_engine.push(Reply(status=502, message="<html>Bad Gateway</html>"))
    _, error = await run_until_error(client)
    assert type(error) is EngineUnavailable
    assert "router" in str(error) and "html" not in str(error)


async def test_a_503_is_engine_busy(fake_engine: FakeEngine, client: EngineClient) -> None:
    fake_engine.push(Reply(status=503, message="The engine is currently busy"))
    _, error = await run_until_error(client)
    assert type(error) is EngineBusy
    assert "busy" in str(error)


async def test_a_503_is_retried_once_before_the_stream_starts(fake_engine: FakeEngine) -> None:
    fake_engine.push(Reply(status=503))
    client = EngineClient(settings_for(fake_engine, client={"max_retries": 1}))
    try:
        stream = client.stream(messages(), max_tokens=64, sampling=SAMPLING, extra_body=EXTRA, request_id="r")
        async with contextlib.aclosing(stream) as chunks:
            last = [c async for c in chunks][-1]
    finally:
        await client.close()
    assert last.finish_reason == "stop"
    assert len(fake_engine.requests) == 2


async def test_an_error_event_mid_stream_is_stream_broken_after_the_partial_text(
        fake_engine: FakeEngine, client: EngineClient) -> None:
    fake_engine.push(Reply(chunks=["第一", "段文字", "never"], fault="error_event", fault_after=2,
                           message="CUDA error: an illegal memory access at /usr/lib/x.so"))
    text, error = await run_until_error(client)
    assert type(error) is StreamBroken
    assert text == "第一段文字"
    assert "in the middle of the answer" in str(error) and "CUDA" not in str(error)


async def test_a_malformed_chunk_is_stream_broken(fake_engine: FakeEngine, client: EngineClient) -> None:
    fake_engine.push(Reply(chunks=["ok ", "so far", "never"], fault="malformed", fault_after=2))
    text, error = await run_until_error(client)
    assert type(error) is StreamBroken
    assert text == "ok so far"
    assert "malformed" in str(error)


async def test_a_connection_closed_mid_stream_is_stream_broken(fake_engine: FakeEngine, client: EngineClient) -> None:
    fake_engine.push(Reply(chunks=["半", "句", "never"], fault="close", fault_after=2))
    text, error = await run_until_error(client)
    assert type(error) is StreamBroken
    assert text == "半句"
    assert "broke in the middle" in str(error)


async def test_an_engine_that_accepts_and_says_nothing_hits_the_idle_timeout(fake_engine: FakeEngine) -> None:
    fake_engine.push(Reply(fault="hang"))
    client = EngineClient(settings_for(fake_engine, client={"idle_timeout_s": 0.3, "max_retries": 0}))
    try:
        _, error = await run_until_error(client)
    finally:
        await client.close()
    assert type(error) is EngineTimeout
    assert "sent nothing for 0.3 s" in str(error)
    assert await asyncio.to_thread(fake_engine.wait_until, lambda: fake_engine.disconnects == 1)


async def test_a_slow_trickle_hits_the_total_timeout_and_keeps_the_partial_text(fake_engine: FakeEngine) -> None:
    fake_engine.push(Reply(chunks=["a"] * 100, token_delay=0.05))
    client = EngineClient(settings_for(fake_engine, client={"total_timeout_s": 0.5, "max_retries": 0}))
    try:
        text, error = await run_until_error(client)
    finally:
        await client.close()
    assert type(error) is EngineTimeout
    assert "longer than 0.5 s" in str(error)
    assert text and set(text) == {"a"} and len(text) < 100


async def test_a_stream_that_ends_without_a_finish_reason_is_stream_broken(
        fake_engine: FakeEngine, client: EngineClient) -> None:
    fake_engine.push(Reply(chunks=["x", "y"], finish_reason=None))
    text, error = await run_until_error(client)
    assert type(error) is StreamBroken and text == "xy"
    assert "without a finish reason" in str(error)
