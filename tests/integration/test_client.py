"""The engine client against the scripted fake engine on a real socket: streaming, limits, cancellation."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator

import pytest

from ocr_ui import client as client_module
from ocr_ui.client import Chunk, EngineClient
from ocr_ui.config import Settings
from tests.support.fake_engine import FakeEngine, Reply, default_text, settings_for

pytestmark = pytest.mark.anyio

PNG_1PX = base64.b64encode(base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4//8/AAX+Av4N70a4AAAAAElFTkSuQmCC")).decode()
DATA_URL = f"data:image/png;base64,{PNG_1PX}"
SAMPLING = {"temperature": 0.0, "top_p": 1.0}
EXTRA = {"top_k": -1, "repetition_penalty": 1.08, "skip_special_tokens": True}


def messages(prompt: str = "提取图中的文字。") -> list[dict]:
    return [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": DATA_URL}}, {"type": "text", "text": prompt}]}]


@pytest.fixture
async def client(engine_settings: Settings) -> AsyncIterator[EngineClient]:
    engine = EngineClient(engine_settings)
    yield engine
    await engine.close()


async def collect(client: EngineClient, prompt: str = "提取图中的文字。", max_tokens: int = 256) -> list[Chunk]:
    stream = client.stream(messages(prompt), max_tokens=max_tokens, sampling=SAMPLING, extra_body=EXTRA,
                           request_id="t1")
    async with contextlib.aclosing(stream) as chunks:
        return [c async for c in chunks]


async def test_streamed_text_equals_non_streamed_text(client: EngineClient) -> None:
    streamed = await collect(client)
    whole = await client.complete(messages(), max_tokens=256, sampling=SAMPLING, extra_body=EXTRA, request_id="t2")
    assert "".join(c.text for c in streamed) == whole.text == default_text("提取图中的文字。")
    assert whole.finish_reason == "stop"


async def test_an_idle_engine_connection_is_dropped_before_the_engine_would_close_it(
        fake_engine: FakeEngine, engine_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    # The real bound is 4 s against vLLM's 5 s; scaled down here so the test does not wait 4 s.
    assert client_module.IDLE_CONNECTION_S < 5.0
    monkeypatch.setattr(client_module, "IDLE_CONNECTION_S", 0.3)
    engine = EngineClient(engine_settings)
    try:  # health() asks /health and /v1/models on the pooled client (the fake closes after a stream)
        assert (await engine.health()).up
        assert (await engine.health()).up
        assert fake_engine.connections == 1  # back to back: the same connection, four requests
        await asyncio.sleep(0.6)
        assert (await engine.health()).up
        assert fake_engine.connections == 2  # idle past the bound: a new one
    finally:
        await engine.close()


async def test_a_stream_has_exactly_one_finish_reason_on_its_last_chunk(client: EngineClient) -> None:
    chunks = await collect(client)
    reasons = [c.finish_reason for c in chunks if c.finish_reason is not None]
    assert reasons == ["stop"]
    assert chunks[-1].finish_reason == "stop"
    assert chunks[-1].output_tokens == len(chunks) - 1  # the usage chunk's count reaches the last chunk


async def test_multibyte_text_split_across_chunks_arrives_intact(fake_engine: FakeEngine, client: EngineClient) -> None:
    text = "表格：第一列 | 第二列 🙂 naïve — 公式 ∑ ok"
    fake_engine.push(Reply(chunks=[text[i:i + 1] for i in range(len(text))]))
    chunks = await collect(client)
    assert "".join(c.text for c in chunks) == text
    assert len(chunks) > 10


async def test_length_finish_reason_is_passed_through(fake_engine: FakeEngine, client: EngineClient) -> None:
    fake_engine.push(Reply(text="cut short", finish_reason="length"))
    chunks = await collect(client)
    assert chunks[-1].finish_reason == "length"


async def test_requests_carry_max_tokens_official_sampling_and_a_data_url(
        fake_engine: FakeEngine, client: EngineClient) -> None:
    await collect(client, max_tokens=321)
    body = fake_engine.requests[-1]
    assert body["max_tokens"] == 321
    assert body["model"] == "tencent/HunyuanOCR"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["temperature"] == 0.0 and body["top_p"] == 1.0
    assert body["top_k"] == -1 and body["repetition_penalty"] == 1.08 and body["skip_special_tokens"] is True
    url = body["messages"][0]["content"][0]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert fake_engine.headers[-1]["authorization"] == "Bearer EMPTY"
    assert fake_engine.headers[-1]["x-request-id"] == "t1"


async def test_the_engine_api_key_is_sent_as_the_bearer_token() -> None:
    with FakeEngine(api_key="s3cret") as fe:
        client = EngineClient(settings_for(fe, engine={"api_key": "s3cret"}, client={"max_retries": 0}))
        try:
            chunks = await collect(client)
        finally:
            await client.close()
        assert chunks[-1].finish_reason == "stop"
        assert fe.headers[-1]["authorization"] == "Bearer s3cret"


async def test_six_parallel_streams_never_exceed_max_in_flight_at_the_engine(fake_engine: FakeEngine) -> None:
    settings = settings_for(fake_engine, client={"max_in_flight": 2, "max_retries": 0})
    fake_engine.default = Reply(token_delay=0.005)
    client = EngineClient(settings)
    try:
        results = await asyncio.gather(*(collect(client, prompt=f"page {i}") for i in range(6)))
    finally:
        await client.close()
    assert [r[-1].finish_reason for r in results] == ["stop"] * 6
    # Counted once the fake's handler has finished writing, a moment after the client read the answer.
    assert await asyncio.to_thread(fake_engine.wait_until, lambda: fake_engine.completed == 6)
    assert fake_engine.peak_in_flight == 2
    assert client.slots.in_use == 0


async def test_closing_the_stream_early_closes_the_upstream_request(fake_engine: FakeEngine, client: EngineClient) -> None:
    fake_engine.push(Reply(chunks=["a"] * 200, token_delay=0.02))
    stream = client.stream(messages(), max_tokens=256, sampling=SAMPLING, extra_body=EXTRA, request_id="stop")
    async with contextlib.aclosing(stream) as chunks:
        async for chunk in chunks:
            assert chunk.text == "a"
            break
    assert await asyncio.to_thread(fake_engine.wait_until, lambda: fake_engine.disconnects == 1)
    assert fake_engine.completed == 0
    assert client.slots.in_use == 0


async def test_cancelling_the_consuming_task_closes_the_upstream_request(
        fake_engine: FakeEngine, client: EngineClient) -> None:
    fake_engine.push(Reply(chunks=["a"] * 200, token_delay=0.02))
    first = asyncio.Event()

    async def consume() -> None:
        stream = client.stream(messages(), max_tokens=256, sampling=SAMPLING, extra_body=EXTRA, request_id="c")
        async with contextlib.aclosing(stream) as chunks:
            async for _ in chunks:
                first.set()

    task = asyncio.create_task(consume())
    await first.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(fake_engine.wait_until, lambda: fake_engine.disconnects == 1)


async def test_health_reports_up_when_the_engine_serves_the_model(client: EngineClient) -> None:
    state = await client.health()
    assert state.up and state.status == "up"
    assert "tencent/HunyuanOCR" in state.detail


async def test_health_reports_down_when_nothing_listens(fake_engine: FakeEngine, client: EngineClient) -> None:
    fake_engine.down()
    state = await client.health()
    assert not state.up and state.status == "down"
    assert "not reachable" in state.detail


async def test_health_reports_down_when_the_engine_says_it_is_unhealthy(
        fake_engine: FakeEngine, client: EngineClient) -> None:
    fake_engine.health_status = 503
    state = await client.health()
    assert (state.up, state.status) == (False, "down")
    assert "503" in state.detail


async def test_health_names_a_served_model_mismatch() -> None:
    with FakeEngine(served_name="other/model") as fe:
        client = EngineClient(settings_for(fe))
        try:
            state = await client.health()
        finally:
            await client.close()
    assert not state.up
    assert "tencent/HunyuanOCR" in state.detail and "model.served_name" in state.detail


async def test_health_names_the_api_key_when_the_engine_refuses_it() -> None:
    with FakeEngine(api_key="right") as fe:
        client = EngineClient(settings_for(fe, engine={"api_key": "wrong"}))
        try:
            state = await client.health()
        finally:
            await client.close()
    assert not state.up and "engine.api_key" in state.detail
    assert "wrong" not in state.detail


def test_the_in_flight_limit_scales_with_data_parallel_replicas(fake_engine: FakeEngine) -> None:
    one = EngineClient(settings_for(fake_engine, client={"max_in_flight": 6}))
    two = EngineClient(settings_for(fake_engine, client={"max_in_flight": 6}, engine={"data_parallel_size": 2}))
    assert (one.slots.limit, two.slots.limit) == (6, 12)
