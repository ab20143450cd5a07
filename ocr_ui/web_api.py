"""``POST /api/ocr``: bearer tokens, a per-client rate limit, a body-size check, then the OCR service.

Order matters: the token is checked first (no work for strangers), then the rate limit, then the size
from ``Content-Length`` before a byte of the body is read, and only then is the body parsed. With
``"stream": true`` the answer is NDJSON: ``page`` events carry the new text of a page (``delta``) and
its status; the last line is a ``done`` event with every page, or an ``error`` event. Errors before the
first page starts (bad input, engine down) are plain HTTP errors with ``{"error": {"code", "message"}}``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ocr_ui import errors
from ocr_ui.api_models import EventTracker, final_answer, parse_request
from ocr_ui.config import Settings
from ocr_ui.errors import AccessDenied, FileTooLarge, OcrError, RateLimited
from ocr_ui.prompts import get_preset
from ocr_ui.service import OcrRequest, OcrService

MB = 1024 * 1024


def error_body(exc: OcrError) -> dict[str, Any]:
    """The JSON error shape every endpoint uses."""
    return {"error": {"code": exc.code, "message": str(exc)}}


def _status_by_code() -> dict[str, int]:
    found: dict[str, int] = {}
    stack: list[type[OcrError]] = [OcrError]
    while stack:
        cls = stack.pop()
        found.setdefault(cls.code, cls.http_status)
        stack.extend(cls.__subclasses__())
    return found


def http_status_for(code: str | None) -> int:
    """The HTTP status that goes with an error code (a failed page carries only the code)."""
    return _status_by_code().get(code or "", errors.BackendError.http_status)


class RateLimiter:
    """A sliding one-minute window per client key; instance state, bounded in keys."""

    def __init__(self, per_minute: int, *, clock: Callable[[], float] = time.monotonic, max_keys: int = 10_000):
        self.per_minute = per_minute
        self._clock = clock
        self._max_keys = max_keys
        self._hits: OrderedDict[str, deque[float]] = OrderedDict()

    def check(self, key: str) -> None:
        """Count one request for ``key``; raises ``RateLimited`` when the window is full."""
        if self.per_minute <= 0:
            return
        now = self._clock()
        hits = self._hits.pop(key, None) or deque()
        while hits and hits[0] <= now - 60.0:
            hits.popleft()
        self._hits[key] = hits  # most recently seen last, so eviction drops the quietest client
        while len(self._hits) > self._max_keys:
            self._hits.popitem(last=False)
        if len(hits) >= self.per_minute:
            wait = max(1, math.ceil(hits[0] + 60.0 - now))
            raise RateLimited(f"Too many requests: at most {self.per_minute} per minute. Try again in {wait} s.")
        hits.append(now)


def check_token(settings: Settings, authorization: str | None) -> str | None:
    """The accepted token's fingerprint, None when the API is open; ``AccessDenied`` otherwise."""
    tokens = [t.get_secret_value() for t in settings.app.api_tokens]
    if not tokens:
        return None
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        raise AccessDenied("This API needs a token: send the header 'Authorization: Bearer <token>'.")
    given_b = given.strip().encode()
    ok = False
    for token in tokens:  # compare against every token so timing does not tell which one is close
        ok |= hmac.compare_digest(given_b, token.encode())
    if not ok:
        raise AccessDenied("The API token is not valid.")
    return hashlib.sha256(given_b).hexdigest()[:16]


async def read_body(request: Request, limit: int, limit_mb: float) -> bytes:
    """The body, refused with ``FileTooLarge`` from Content-Length before reading (or while streaming in)."""
    too_large = FileTooLarge(f"The upload is larger than {limit_mb:g} MB, the most this server accepts.")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():  # no Content-Length (chunked upload): count as it arrives
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def api_router(settings: Settings, service: OcrService, *, limiter: RateLimiter | None = None) -> APIRouter:
    """The router with ``POST /api/ocr`` (limiter injectable for tests)."""
    router = APIRouter()
    limiter = limiter or RateLimiter(settings.app.rate_limit_per_minute)
    upload_limit_mb = settings.app.max_upload_mb
    # base64 grows the file by 4/3; leave room for the JSON around it.
    body_limit = math.ceil(upload_limit_mb * MB * 4 / 3) + 64 * 1024

    @router.post("/api/ocr")
    async def ocr(request: Request) -> Response:
        fingerprint = check_token(settings, request.headers.get("authorization"))
        client_ip = request.client.host if request.client else "unknown"
        limiter.check(f"token:{fingerprint}" if fingerprint else f"ip:{client_ip}")
        body = parse_request(await read_body(request, body_limit, upload_limit_mb))
        data = body.file_bytes()
        if len(data) > upload_limit_mb * MB:
            raise FileTooLarge(f"The file is {len(data) / MB:.1f} MB; at most {upload_limit_mb:g} MB is accepted.")
        output = get_preset(settings.model.profile, body.preset).output
        req = OcrRequest(data=data, preset=body.preset, options=body.options.task_options(), pages=body.pages,
                         max_tokens=body.max_tokens, filename=body.filename)
        if body.stream:
            return await _stream(service, req, output, settings.app.stream_flush_s)
        update = await service.run_to_end(req)
        answer = final_answer(update, output)
        failed = [p for p in update.pages if p.status == "failed"]
        if update.pages and len(failed) == len(update.pages):
            # Nothing was read: answer with the (shared) reason's status so callers can retry on 503.
            first = failed[0]
            answer["error"] = {"code": first.error_code or "engine_error", "message": first.error or ""}
            return JSONResponse(answer, status_code=http_status_for(first.error_code))
        return JSONResponse(answer)

    return router


async def _stream(service: OcrService, req: OcrRequest, output: str, flush_s: float) -> Response:
    updates = service.run(req)
    try:
        first = await anext(updates)  # input errors surface here, as a plain HTTP error
    except BaseException:
        await updates.aclose()
        raise

    async def lines() -> AsyncIterator[bytes]:
        # The service yields once per engine chunk; a line per chunk made JSON and socket writes the
        # app's biggest cost after the SDK's parsing. Text is sent at most every ``flush_s`` per request;
        # the first text, status changes and the end go out at once (see EventTracker).
        tracker = EventTracker()
        update, last_sent = first, 0.0
        async with aclosing(updates):  # a client that leaves closes the service, which closes the engine stream
            try:
                for event in tracker.events(update):
                    yield _line(event)
                async for update in updates:
                    now = time.monotonic()
                    events = tracker.events(update, text_due=now - last_sent >= flush_s)
                    if events:
                        last_sent = now
                        yield b"".join(_line(event) for event in events)
                for event in tracker.events(update):  # whatever text was held back
                    yield _line(event)
                yield _line({"event": "done", **final_answer(update, output)})
            except OcrError as exc:
                for event in tracker.events(update):
                    yield _line(event)
                yield _line({"event": "error", "request_id": req.request_id, **error_body(exc)})

    return StreamingResponse(lines(), media_type="application/x-ndjson")


def _line(payload: dict[str, Any]) -> bytes:
    return (json.dumps(payload, ensure_ascii=False) + "\n").encode()
