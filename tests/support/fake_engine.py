"""A scripted OpenAI-compatible engine on a real socket, speaking vLLM's wire format.

It runs a tiny HTTP/1.1 server on its own event loop in a background thread, so the code under test
talks to it through a real TCP connection (openai SDK, httpx2, connection pool and all). The HTTP
layer is hand-rolled on purpose: faults such as "close the connection mid-stream", "accept and send
nothing" or "stop listening" need control a framework would hide.

    with FakeEngine() as fe:
        fe.push(Reply(text="第一页", token_delay=0.01))       # next chat request gets this reply
        client = openai.AsyncOpenAI(base_url=fe.base_url, api_key="EMPTY")
        ...
        fe.requests[-1]["max_tokens"], fe.peak_in_flight, fe.disconnects

Replies are taken from the queue filled by ``push`` (one per chat request); when it is empty,
``fe.default`` answers (text derived from the prompt, several chunks, Chinese included).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

Fault = Literal["error_event", "malformed", "close", "hang"]


@dataclass
class Reply:
    """How the fake answers one chat request."""

    text: str | None = None  # None: text derived from the prompt (deterministic, multi-byte)
    chunks: list[str] | None = None  # explicit stream pieces; overrides text
    status: int = 200  # non-200: an error body in vLLM's shape, no stream
    message: str = ""  # error message for status != 200 or the error event
    param: str | None = None  # the error body's "param" (vLLM: "input_tokens" on context overflow)
    first_token_delay: float = 0.0  # seconds before the first chunk (queue wait + prefill)
    token_delay: float = 0.0  # seconds between chunks
    fault: Fault | None = None  # what goes wrong after `fault_after` chunks (streaming only)
    fault_after: int = 2
    finish_reason: str | None = "stop"  # None: a stream that ends without one (a crashed engine)


class _ClosedOnPurpose(ConnectionResetError):
    """The 'close' fault: the fake itself dropped the connection, so it is no client disconnect."""


def default_text(prompt: str) -> str:
    """The text the fake 'recognises' for a prompt: stable, short, with Chinese and an emoji."""
    digest = hashlib.sha256(prompt.encode()).hexdigest()
    return f"页面 {digest[:8]} 识别结果：\n第一行 first line ✓ {digest[8:14]}\n第二行 — 表格 🙂 end."


def split_text(text: str, size: int = 3) -> list[str]:
    """Cut text into pieces of ``size`` characters (so multi-byte characters sit on chunk edges)."""
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def _prompt_of(body: dict[str, Any]) -> str:
    parts = []
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return "\n".join(parts)


class FakeEngine:
    """The scripted engine; use as a context manager (``start()``/``stop()`` also work)."""

    def __init__(self, *, served_name: str = "tencent/HunyuanOCR", api_key: str | None = None,
                 script: list[Reply] | None = None, max_model_len: int = 8192) -> None:
        self.served_name = served_name
        self.api_key = api_key
        self.max_model_len = max_model_len
        self.default = Reply()
        self.responder: Callable[[dict[str, Any]], Reply] | None = None  # overrides queue and default
        self.health_status = 200
        # None means "derive": running = chat requests in flight, waiting = 0, kv usage = 0.
        self.metric_values: dict[str, float | None] = {
            "num_requests_running": None, "num_requests_waiting": None, "kv_cache_usage_perc": None}
        self.requests: list[dict[str, Any]] = []  # every chat request body, in arrival order
        self.connections = 0  # TCP connections accepted
        self.headers: list[dict[str, str]] = []  # their headers (lower-case names)
        self.in_flight = 0
        self.peak_in_flight = 0
        self.disconnects = 0  # streams the client closed before the end
        self.completed = 0  # chat requests answered to the end
        self._queue: deque[Reply] = deque(script or [])
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    # ------------------------------------------------------------------ public, called from tests

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    def push(self, *replies: Reply) -> None:
        """Queue replies for the next chat requests, in order."""
        with self._lock:
            self._queue.extend(replies)

    def set_metrics(self, **values: float | None) -> None:
        """Set /metrics gauges: num_requests_running, num_requests_waiting, kv_cache_usage_perc."""
        unknown = set(values) - set(self.metric_values)
        if unknown:
            raise KeyError(f"unknown metric {sorted(unknown)}")
        with self._lock:
            self.metric_values.update(values)

    def start(self) -> FakeEngine:
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self._listen())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="fake-engine", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("fake engine did not start")
        return self

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
        self._loop = None

    def down(self) -> None:
        """Stop listening and drop every open connection: clients now get 'connection refused'."""
        self._call(self._shutdown())

    def up(self) -> None:
        """Listen again on the same port."""
        self._call(self._listen())

    def wait_until(self, predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
        """Poll ``predicate`` (blocking; use ``await asyncio.to_thread(fe.wait_until, ...)`` in async tests)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(0.01)
        return predicate()

    def __enter__(self) -> FakeEngine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ server internals

    def _call(self, coro: Any) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        self.connections += 1
        try:
            while True:  # keep-alive: one request after another on the same connection
                request = await _read_request(reader)
                if request is None:
                    return
                method, path, headers, body = request
                if not await self._route(method, path, headers, body, reader, writer):
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            self._writers.discard(writer)
            writer.transport.abort()

    async def _route(self, method: str, path: str, headers: dict[str, str], raw: bytes,
                     reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection must close afterwards."""
        path = path.split("?", 1)[0]
        if method == "GET" and path == "/health":
            await _send(writer, self.health_status, b"", "text/plain")
        elif method == "GET" and path == "/metrics":
            await _send(writer, 200, self._metrics_text().encode(), "text/plain; version=0.0.4")
        elif path.startswith("/v1/") and not self._authorised(headers):
            await _send_error(writer, 401, "Unauthorized", "Unauthorized", None)
        elif method == "GET" and path == "/v1/models":
            card = {"id": self.served_name, "object": "model", "owned_by": "vllm", "max_model_len": self.max_model_len}
            await _send(writer, 200, json.dumps({"object": "list", "data": [card]}).encode())
        elif method == "POST" and path == "/v1/chat/completions":
            return await self._chat(headers, raw, reader, writer)
        else:
            await _send_error(writer, 404, "Not Found", "NotFoundError", None)
        return True

    def _authorised(self, headers: dict[str, str]) -> bool:
        return self.api_key is None or headers.get("authorization") == f"Bearer {self.api_key}"

    def _metrics_text(self) -> str:
        with self._lock:
            values = dict(self.metric_values)
            running = self.in_flight
        derived = {"num_requests_running": running, "num_requests_waiting": 0, "kv_cache_usage_perc": 0.0}
        lines = []
        for name, value in values.items():
            lines.append(f"# TYPE vllm:{name} gauge")
            number = derived[name] if value is None else value
            lines.append(f'vllm:{name}{{engine="0",model_name="{self.served_name}"}} {float(number)}')
        return "\n".join(lines) + "\n"

    def _next_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            if self.responder is not None:
                return self.responder(body)
            return self._queue.popleft() if self._queue else self.default

    async def _chat(self, headers: dict[str, str], raw: bytes, reader: asyncio.StreamReader,
                    writer: asyncio.StreamWriter) -> bool:
        try:
            body = json.loads(raw)
        except ValueError:
            await _send_error(writer, 400, "request body is not JSON", "BadRequestError", None)
            return True
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
        if body.get("model") != self.served_name:
            await _send_error(writer, 404, f"The model `{body.get('model')}` does not exist.", "NotFoundError", "model")
            return True
        reply = self._next_reply(body)
        if reply.status != 200:
            await _send_error(writer, reply.status, reply.message or "error", _error_type(reply.status), reply.param)
            return True
        text = reply.text if reply.text is not None else default_text(_prompt_of(body))
        pieces = reply.chunks if reply.chunks is not None else split_text(text)
        with self._lock:
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        # The client sends nothing while it waits for the answer, so EOF on the reader means it left.
        # The answer says "connection: close", so this read can never swallow a next request's bytes.
        gone = asyncio.ensure_future(reader.read(1))
        answer = asyncio.ensure_future(self._answer(body, reply, pieces, writer))
        try:
            await asyncio.wait({gone, answer}, return_when=asyncio.FIRST_COMPLETED)
            if answer.done() and answer.exception() is None:
                with self._lock:
                    self.completed += 1
                return False
            if answer.done() and isinstance(answer.exception(), _ClosedOnPurpose):
                raise ConnectionResetError("closed mid-stream on purpose")
            # The client left: seen as EOF on the reader, or as a failed write when its reset came first.
            with self._lock:
                self.disconnects += 1
            raise ConnectionResetError("client closed the stream")
        finally:
            answer.cancel()
            gone.cancel()
            with self._lock:
                self.in_flight -= 1

    async def _answer(self, body: dict[str, Any], reply: Reply, pieces: list[str], writer: asyncio.StreamWriter) -> None:
        created, rid = int(time.time()), f"chatcmpl-{len(self.requests)}"
        base = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": self.served_name}
        usage = {"prompt_tokens": 100, "completion_tokens": len(pieces), "total_tokens": 100 + len(pieces)}
        if reply.fault == "hang":
            await asyncio.Event().wait()  # until the client gives up
        await asyncio.sleep(reply.first_token_delay)
        if not body.get("stream"):
            message = {"role": "assistant", "content": "".join(pieces)}
            choice = {"index": 0, "message": message, "finish_reason": reply.finish_reason}
            full = {**base, "object": "chat.completion", "choices": [choice], "usage": usage}
            await _send(writer, 200, json.dumps(full, ensure_ascii=False).encode(), close=True)
            return
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                     b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n")
        events: list[bytes] = []
        for i, piece in enumerate(pieces):
            delta: dict[str, Any] = {"content": piece} if i else {"role": "assistant", "content": piece}
            last = i == len(pieces) - 1
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reply.finish_reason if last else None}
            events.append(_sse({**base, "choices": [choice]}))
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append(_sse({**base, "choices": [], "usage": usage}))
        for i, event in enumerate(events):
            if reply.fault and i == reply.fault_after:
                await self._fault(reply, writer)
                return
            if i:
                await asyncio.sleep(reply.token_delay)
            await _write_split(writer, event)
        await _write_chunk(writer, b"data: [DONE]\n\n")
        await _write_chunk(writer, b"")

    async def _fault(self, reply: Reply, writer: asyncio.StreamWriter) -> None:
        if reply.fault == "close":
            writer.transport.abort()  # no terminating chunk: the client sees a broken body
            raise _ClosedOnPurpose("closed mid-stream on purpose")
        if reply.fault == "malformed":
            await _write_chunk(writer, b'data: {"id": "chatcmpl-x", "choices": [{"delta": {"content": "ab\n\n')
        else:  # error_event: what vLLM sends when generation fails after the 200 went out
            error = {"message": reply.message or "engine error", "type": "InternalServerError", "param": None, "code": 500}
            await _write_chunk(writer, _sse({"error": error}))
        await _write_chunk(writer, b"data: [DONE]\n\n")
        await _write_chunk(writer, b"")


# ---------------------------------------------------------------------- HTTP/1.1 helpers


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return method, path, headers, body


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 422: "Unprocessable Entity",
            429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}


def _error_type(status: int) -> str:
    return {400: "BadRequestError", 401: "Unauthorized", 404: "NotFoundError", 503: "ServiceUnavailableError"}.get(
        status, "InternalServerError")


async def _send(writer: asyncio.StreamWriter, status: int, body: bytes, ctype: str = "application/json",
                *, close: bool = False) -> None:
    head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\ncontent-type: {ctype}\r\n"
            f"content-length: {len(body)}\r\n{'connection: close' + chr(13) + chr(10) if close else ''}\r\n")
    writer.write(head.encode() + body)
    await writer.drain()


async def _send_error(writer: asyncio.StreamWriter, status: int, message: str, kind: str, param: str | None) -> None:
    body = {"error": {"message": message, "type": kind, "param": param, "code": status}}
    await _send(writer, status, json.dumps(body).encode())


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n"


async def _write_chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    await writer.drain()


async def _write_split(writer: asyncio.StreamWriter, event: bytes) -> None:
    # Send an event as two HTTP chunks cut inside a multi-byte character when there is one, so the
    # client's decoder must join bytes across reads (as it must when TCP cuts a frame anywhere).
    cut = next((i for i in range(1, len(event)) if 0x80 <= event[i] < 0xC0), len(event) // 2)
    await _write_chunk(writer, event[:cut])
    await asyncio.sleep(0)
    await _write_chunk(writer, event[cut:])


def settings_for(fake: FakeEngine, **sections: dict[str, Any]) -> Any:
    """App settings (``ocr_ui.config.Settings``) aimed at ``fake``, with overrides per section.

    ``settings_for(fe, client={"max_in_flight": 2})``: values go through the environment-override path,
    exactly as an operator would set them.
    """
    from ocr_ui.config import load_config

    environ = {"OCR_UI__ENGINE__BASE_URL": fake.base_url}
    for section, values in sections.items():
        for key, value in values.items():
            environ[f"OCR_UI__{section.upper()}__{key.upper()}"] = str(value)
    return load_config(None, environ)
