"""The engine client: one ``openai.AsyncOpenAI`` per process, streaming with limits and timeouts.

Every request holds one of ``config.in_flight_limit`` slots for its whole life. Timeouts are split by
phase: ``connect`` to open a connection, ``idle`` as the longest silence between chunks (the openai read
timeout, which also covers the engine's queue and prefill), and ``total`` as an absolute deadline for
the page (``asyncio.timeout_at`` around each wait, never across a ``yield``, so the deadline cannot
fire inside the consumer's code). Every openai/httpx2 failure is translated into the ``BackendError``
tree in :func:`translate_error`, and nothing the engine wrote reaches a user beyond a short, checked
summary.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any, Literal

import httpx2
import openai

from ocr_ui.config import Settings, in_flight_limit
from ocr_ui.errors import (
    BackendError,
    EngineBusy,
    EngineRejected,
    EngineTimeout,
    EngineUnavailable,
    StreamBroken,
)
from ocr_ui.slots import Slots

HEALTH_TIMEOUT_S = 5.0  # a health probe is never worth more than a few seconds
# vLLM's HTTP server closes a connection after 5 s idle (VLLM_HTTP_TIMEOUT_KEEP_ALIVE), as long as httpx
# keeps one by default: a page sent on a connection the server is closing that moment fails before any
# reply. Dropping idle connections first closes that race, for one TCP handshake after a quiet spell.
IDLE_CONNECTION_S = 4.0
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,39}$")


@dataclass(frozen=True)
class Chunk:
    """A piece of streamed text; the last chunk of a stream carries the finish reason (and usage)."""

    text: str
    finish_reason: str | None = None
    output_tokens: int | None = None


@dataclass(frozen=True)
class EngineState:
    """What a health probe found: ``detail`` is a short sentence safe to show."""

    up: bool
    status: Literal["up", "starting", "down"]
    detail: str


def _safe_word(value: object) -> str | None:
    """An engine-supplied identifier (a parameter or error type name), or None if it is anything else."""
    return value if isinstance(value, str) and _IDENTIFIER.match(value) else None


def _error_body(exc: openai.APIError) -> dict[str, Any]:
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]
    return body if isinstance(body, dict) else {}


def translate_error(exc: BaseException, settings: Settings, *, started: bool) -> BackendError:
    """The one place where openai/httpx2/timeout errors become ``BackendError``s (``started``: text arrived)."""
    c = settings.client
    if isinstance(exc, BackendError):
        return exc
    if isinstance(exc, openai.APITimeoutError | httpx2.TimeoutException):
        if isinstance(exc, httpx2.ConnectTimeout) or isinstance(exc.__cause__, httpx2.ConnectTimeout):
            return EngineUnavailable(f"Could not connect to the OCR engine within {c.connect_timeout_s:g} s. "
                                     "It may be stopped or overloaded; try again shortly.")
        return EngineTimeout(f"The OCR engine sent nothing for {c.idle_timeout_s:g} s (client.idle_timeout_s). "
                             "It may be overloaded or stuck; try again later.")
    if isinstance(exc, TimeoutError):
        return EngineTimeout(f"The page took longer than {c.total_timeout_s:g} s (client.total_timeout_s). "
                             "Lower max tokens or the image size, or raise the limit.")
    if isinstance(exc, openai.APIConnectionError | httpx2.TransportError):
        if started:
            return StreamBroken("The connection to the OCR engine broke in the middle of the answer.")
        return EngineUnavailable("The OCR engine is not reachable. It may be starting up or stopped; "
                                 "try again shortly.")
    if isinstance(exc, openai.APIStatusError):
        return _from_status(exc, settings)
    if isinstance(exc, openai.APIError):  # an error event inside a 200 stream: no status code
        kind = _safe_word(_error_body(exc).get("type"))
        return StreamBroken("The OCR engine reported an error in the middle of the answer"
                            + (f" ({kind})." if kind else "."))
    if isinstance(exc, json.JSONDecodeError):
        return StreamBroken("The OCR engine sent a malformed chunk; the answer stops there.")
    return BackendError("The OCR engine failed in an unexpected way; try again.")


def _from_status(exc: openai.APIStatusError, settings: Settings) -> BackendError:
    status = exc.status_code
    body = _error_body(exc)
    message = str(body.get("message") or "")
    if status in (400, 422):
        if body.get("param") == "input_tokens" or "context length" in message.lower():
            return EngineRejected("The page is too large for the engine's context (engine.max_model_len): "
                                  "lower images.max_side or max tokens.")
        param = _safe_word(body.get("param"))
        return EngineRejected("The OCR engine rejected the request as invalid"
                              + (f" (parameter '{param}')." if param else "."))
    if status in (401, 403):
        return EngineRejected("The OCR engine refused the app's API key: check engine.api_key "
                              "(OCR_UI__ENGINE__API_KEY) against the engine's --api-key.")
    if status == 404:
        return EngineRejected(f"The OCR engine does not serve the model '{settings.model.served_name}': "
                              "check model.served_name against the engine's --served-model-name.")
    if status in (429, 503):
        return EngineBusy("The OCR engine is busy; try again in a moment.")
    if status in (502, 504):
        # A router or proxy in front of the engines answers these when no engine behind it answers.
        return EngineUnavailable("The OCR engine cannot be reached behind its router; it may be down or restarting.")
    if status >= 500:
        return BackendError(f"The OCR engine failed on this page (HTTP {status}); try again.")
    return EngineRejected(f"The OCR engine refused the request (HTTP {status}).")


def _choices(item: object) -> list[dict[str, Any]]:
    """The choices of one streamed chunk (a plain dict); anything malformed counts as none."""
    choices = item.get("choices") if isinstance(item, dict) else None
    return [c for c in choices if isinstance(c, dict)] if isinstance(choices, list) else []


@dataclass(frozen=True)
class RawChunk:
    """What one streamed chat-completion chunk carries: its text pieces, a finish reason, the usage."""

    texts: list[str]
    finish_reason: str | None
    completion_tokens: int | None


def read_chunk(item: object) -> RawChunk:
    """Pick text, finish reason and usage out of one plain-dict chunk; malformed parts count as absent."""
    usage = item.get("usage") if isinstance(item, dict) else None
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    texts, finish = [], None
    for choice in _choices(item):
        finish = choice.get("finish_reason") or finish
        delta = choice.get("delta")
        text = delta.get("content") if isinstance(delta, dict) else None
        if isinstance(text, str) and text:
            texts.append(text)
    return RawChunk(texts, finish if isinstance(finish, str) else None, int(tokens) if isinstance(tokens, int) else None)


async def open_chat_stream(client: openai.AsyncOpenAI, body: dict[str, Any],
                           headers: dict[str, str] | None = None) -> openai.AsyncStream[object]:
    """Start a streamed chat completion whose chunks stay plain dicts (see :func:`read_chunk`).

    The SDK's own request building, retries, SSE decoding and error events, without a typed
    ``ChatCompletionChunk`` per token: building those was ~70 % of the app's CPU per streamed chunk.
    Shared with the load test so that both measure the same client path.
    """
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    return await client.post("/chat/completions", cast_to=object, body=body, stream=True,
                             stream_cls=openai.AsyncStream[object], options={"headers": headers or {}})


class EngineClient:
    """Streams chat completions from the engine; ``slots`` bounds the requests open at once."""

    def __init__(self, settings: Settings, *, http_client: httpx2.AsyncClient | None = None,
                 metrics: Any = None) -> None:
        c = settings.client
        self.settings = settings
        self.metrics = metrics
        self.slots = Slots(in_flight_limit(settings))
        key = settings.engine.api_key.get_secret_value() if settings.engine.api_key else "EMPTY"
        self._http = http_client or openai.DefaultAsyncHttpx2Client(limits=httpx2.Limits(
            max_connections=1000, max_keepalive_connections=100, keepalive_expiry=IDLE_CONNECTION_S))  # SDK's sizes
        self._openai = openai.AsyncOpenAI(
            base_url=settings.engine.base_url, api_key=key, http_client=self._http, max_retries=c.max_retries,
            timeout=openai.Timeout(c.total_timeout_s, connect=c.connect_timeout_s, read=c.idle_timeout_s),
        )
        self.root_url = re.sub(r"/v1/?$", "", settings.engine.base_url.rstrip("/"))

    def _body(self, messages: list[dict[str, Any]], max_tokens: int, sampling: dict[str, Any],
              extra_body: dict[str, Any], request_id: str) -> dict[str, Any]:
        return {"model": self.settings.model.served_name, "messages": messages, "max_tokens": max_tokens,
                "extra_body": extra_body, "extra_headers": {"X-Request-Id": request_id}, **sampling}

    async def _raw_stream(self, messages: list[dict[str, Any]], max_tokens: int, sampling: dict[str, Any],
                          extra_body: dict[str, Any], request_id: str) -> openai.AsyncStream[object]:
        body = {"model": self.settings.model.served_name, "messages": messages, "max_tokens": max_tokens,
                **sampling, **extra_body}
        return await open_chat_stream(self._openai, body, {"X-Request-Id": request_id})

    async def stream(self, messages: list[dict[str, Any]], *, max_tokens: int, sampling: dict[str, Any],
                     extra_body: dict[str, Any], request_id: str, priority: int = 0,
                     on_sent: Callable[[float], None] | None = None) -> AsyncGenerator[Chunk, None]:
        """Stream one answer; the last chunk has ``finish_reason``. Close it (aclosing) to abort upstream.

        ``on_sent(seconds)`` is called when a slot was free and the request leaves, with the time waited.
        """
        c = self.settings.client
        queued = time.monotonic()
        started = False
        finish: str | None = None
        tokens: int | None = None
        async with self.slots.hold(priority, timeout=c.acquire_timeout_s):
            sent = time.monotonic()
            if self.metrics:
                self.metrics.observe_queue_wait(sent - queued)
            if on_sent is not None:
                on_sent(sent - queued)
            deadline = asyncio.get_running_loop().time() + c.total_timeout_s
            try:
                with self.metrics.in_flight() if self.metrics else contextlib.nullcontext():
                    async with asyncio.timeout_at(deadline):
                        stream = await self._raw_stream(messages, max_tokens, sampling, extra_body, request_id)
                    async with stream:  # leaving this block closes the HTTP stream: vLLM aborts the request
                        chunks = aiter(stream)
                        while True:
                            async with asyncio.timeout_at(deadline):
                                item = await anext(chunks, None)
                            if item is None:
                                break
                            raw = read_chunk(item)
                            tokens = raw.completion_tokens if raw.completion_tokens is not None else tokens
                            finish = raw.finish_reason or finish
                            for text in raw.texts:
                                if not started and self.metrics:
                                    self.metrics.observe_ttft(time.monotonic() - sent)
                                started = True
                                yield Chunk(text)
            except (openai.OpenAIError, httpx2.HTTPError, json.JSONDecodeError, TimeoutError) as exc:
                raise translate_error(exc, self.settings, started=started) from exc
        # The slot is free again before the last chunk goes out: the engine's part is over.
        if finish is None:
            raise StreamBroken("The OCR engine's answer ended without a finish reason; it may have crashed.")
        yield Chunk("", finish_reason=finish, output_tokens=tokens)

    async def complete(self, messages: list[dict[str, Any]], *, max_tokens: int, sampling: dict[str, Any],
                       extra_body: dict[str, Any], request_id: str, priority: int = 0) -> Chunk:
        """The whole answer in one response (no streaming); same slots, timeouts and errors."""
        c = self.settings.client
        async with self.slots.hold(priority, timeout=c.acquire_timeout_s):
            try:
                with self.metrics.in_flight() if self.metrics else contextlib.nullcontext():
                    async with asyncio.timeout(c.total_timeout_s):
                        result = await self._openai.chat.completions.create(
                            **self._body(messages, max_tokens, sampling, extra_body, request_id))
            except (openai.OpenAIError, httpx2.HTTPError, json.JSONDecodeError, TimeoutError) as exc:
                raise translate_error(exc, self.settings, started=False) from exc
        if not result.choices:
            raise StreamBroken("The OCR engine answered without any text choice.")
        choice = result.choices[0]
        tokens = result.usage.completion_tokens if result.usage is not None else None
        return Chunk(choice.message.content or "", finish_reason=choice.finish_reason, output_tokens=tokens)

    async def health(self) -> EngineState:
        """Probe ``{root}/health`` and ``/v1/models``; never raises."""
        timeout = httpx2.Timeout(HEALTH_TIMEOUT_S, connect=min(HEALTH_TIMEOUT_S, self.settings.client.connect_timeout_s))
        try:
            response = await self._http.get(f"{self.root_url}/health", timeout=timeout)
        except httpx2.HTTPError:
            return EngineState(False, "down", "The OCR engine is not reachable (stopped, or still loading the model).")
        if response.status_code != 200:
            return EngineState(False, "down", f"The OCR engine reports itself unhealthy (HTTP {response.status_code}).")
        try:
            models = await self._openai.with_options(max_retries=0, timeout=timeout).models.list()
        except openai.APIStatusError as exc:
            if exc.status_code >= 500:
                return EngineState(False, "starting", "The OCR engine is up but not serving models yet.")
            return EngineState(False, "down", str(translate_error(exc, self.settings, started=False)))
        except (openai.OpenAIError, httpx2.HTTPError) as exc:
            return EngineState(False, "down", str(translate_error(exc, self.settings, started=False)))
        served = self.settings.model.served_name
        if not any(m.id == served for m in models.data):
            return EngineState(False, "down", f"The OCR engine is up but does not serve '{served}' "
                                              "(check model.served_name).")
        return EngineState(True, "up", f"The OCR engine is up and serves '{served}'.")

    async def close(self) -> None:
        """Close the connection pool (also an injected ``http_client``)."""
        await self._openai.close()
