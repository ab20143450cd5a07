"""The real vLLM server on the tiny checkpoint, talked to with the plain openai SDK."""

from __future__ import annotations

import openai
import pytest

from tests.e2e.conftest import Server
from tests.e2e.engine_metrics import wait_until_idle
from tests.e2e.media import GREEDY, GREEDY_EXTRA, messages, page_image

pytestmark = pytest.mark.e2e


def _client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="EMPTY", timeout=120, max_retries=0)


def test_engine_serves_the_configured_model_name(vllm_server: Server) -> None:
    models = _client(vllm_server).models.list()
    assert [m.id for m in models.data] == [vllm_server.settings.model.served_name]


def test_streamed_text_equals_non_streamed_text(vllm_server: Server) -> None:
    client = _client(vllm_server)
    request = {"model": vllm_server.settings.model.served_name, "messages": messages(page_image("INVOICE 7")),
               "max_tokens": 24, **GREEDY, "extra_body": GREEDY_EXTRA}
    whole = client.chat.completions.create(**request)
    pieces, finishes = [], []
    with client.chat.completions.create(**request, stream=True) as stream:
        for chunk in stream:
            for choice in chunk.choices:
                pieces.append(choice.delta.content or "")
                if choice.finish_reason:
                    finishes.append(choice.finish_reason)
    assert whole.usage is not None and whole.usage.completion_tokens == 24
    assert whole.choices[0].message.content
    assert "".join(pieces) == whole.choices[0].message.content
    assert finishes == ["length"]


def test_closing_a_stream_aborts_the_request_in_the_engine(vllm_server: Server) -> None:
    client = _client(vllm_server)
    root = vllm_server.root_url
    tokens_before = wait_until_idle(root)
    # ~25 s of decoding here if it ran to the end (vLLM does not count aborts in request_success,
    # so the generated-token counter shows that it stopped early).
    max_tokens = 16000
    stream = client.chat.completions.create(
        model=vllm_server.settings.model.served_name, messages=messages(page_image("STOP ME")),
        max_tokens=max_tokens, stream=True, **GREEDY, extra_body=GREEDY_EXTRA)
    received = 0
    for chunk in stream:
        received += sum(1 for c in chunk.choices if c.delta.content)
        if received >= 5:
            break
    stream.close()  # what the app's Stop does: the HTTP connection goes away
    assert received == 5
    assert wait_until_idle(root) - tokens_before < max_tokens
