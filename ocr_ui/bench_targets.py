"""What the load test talks to: the engine (openai SDK, streamed as the app streams) or the app (POST /api/ocr, NDJSON).

A target's ``run(page, record)`` never raises for a failed request: it fills ``record.error`` with a
stable code (the app's error codes, ``http_<status>``, ``timeout``) so the level's error rate counts it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from dataclasses import dataclass
from typing import Any

import httpx2
import openai

from ocr_ui import preprocess
from ocr_ui.bench_report import Record
from ocr_ui.client import open_chat_stream, read_chunk, translate_error
from ocr_ui.config import Settings
from ocr_ui.profiles import get_profile
from ocr_ui.prompts import TaskOptions, build_messages, build_prompt, get_preset


@dataclass(frozen=True)
class BenchPage:
    """One input of the load test: the file as uploaded and the page as the app would send it."""

    name: str
    data: bytes  # the file (what the app target uploads)
    data_url: str  # the rendered page (what the engine target sends)
    width: int
    height: int
    image_tokens: int


def prepare_pages(named: list[tuple[str, bytes]], settings: Settings, prompt: str, max_tokens: int) -> list[BenchPage]:
    """Render each file's first page exactly as the app would (fit to the token budget, encode)."""
    profile = get_profile(settings.model.profile)
    budget = preprocess.token_budget(settings.engine.max_model_len, prompt, max_tokens)
    pages = []
    for name, data in named:
        page = next(preprocess.iter_pages(data, settings.images, profile, budget_tokens=budget, pages="1"))
        pages.append(BenchPage(name, data, page.data_url, page.width, page.height, page.image_tokens))
    return pages


def preset_prompt(settings: Settings, preset: str) -> str:
    """The prompt text of a preset (no options) for the configured profile."""
    profile = get_profile(settings.model.profile)
    return build_prompt(profile, get_preset(profile.name, preset), TaskOptions())


class EngineTarget:
    """Streams chat completions straight from the engine, with the app's message shape and sampling."""

    name = "engine"

    def __init__(self, settings: Settings, url: str, *, model: str, prompt: str, max_tokens: int,
                 ignore_eos: bool, timeout_s: float, api_key: str | None = None) -> None:
        self.settings = settings
        self.profile = get_profile(settings.model.profile)
        self.model, self.prompt, self.max_tokens, self.ignore_eos = model, prompt, max_tokens, ignore_eos
        self.timeout_s = timeout_s
        self._client = openai.AsyncOpenAI(base_url=url, api_key=api_key or "EMPTY", max_retries=0,
                                          timeout=openai.Timeout(timeout_s, connect=10.0))

    async def run(self, page: BenchPage, record: Record) -> None:
        """One streamed request; fills TTFT, latency, output tokens or the error code."""
        sampling, extra = self.profile.sampling()
        if self.ignore_eos:
            extra = {**extra, "ignore_eos": True}  # random weights never stop: make every answer max_tokens long
        record.image_tokens = page.image_tokens
        sent = time.perf_counter()
        started, chunks, usage_tokens = False, 0, None
        try:
            async with asyncio.timeout(self.timeout_s):
                body: dict[str, Any] = {
                    "model": self.model, "messages": build_messages(self.profile, self.prompt, page.data_url),
                    "max_tokens": self.max_tokens, **sampling, **extra}
                # The app's own streaming path (plain-dict chunks): a typed chunk per token made this
                # load process a ceiling of its own at high concurrency on the H200.
                stream = await open_chat_stream(self._client, body)
                async with stream:
                    async for item in stream:
                        raw = read_chunk(item)
                        if raw.completion_tokens is not None:
                            usage_tokens = raw.completion_tokens
                        if raw.texts and not started:
                            record.ttft_s = time.perf_counter() - sent
                            started = True
                        chunks += len(raw.texts)
            record.latency_s = time.perf_counter() - sent
            record.output_tokens = usage_tokens if usage_tokens is not None else chunks
        except (openai.OpenAIError, httpx2.HTTPError, json.JSONDecodeError, TimeoutError) as exc:
            error = translate_error(exc, self.settings, started=started)
            record.error, record.detail = error.code, str(error)[:200]

    async def close(self) -> None:
        await self._client.close()


class AppTarget:
    """Uploads each page to the app's ``POST /api/ocr`` with ``stream: true`` and reads the NDJSON events."""

    name = "app"

    def __init__(self, url: str, *, preset: str, max_tokens: int, timeout_s: float, token: str | None = None) -> None:
        self.url = url.rstrip("/") + "/api/ocr"
        self.preset, self.max_tokens, self.timeout_s = preset, max_tokens, timeout_s
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self._http = httpx2.AsyncClient(timeout=httpx2.Timeout(timeout_s, connect=10.0), headers=headers)

    async def run(self, page: BenchPage, record: Record) -> None:
        """One upload; TTFT is the first text delta, queue wait comes from the app's answer when it says."""
        body = {"file": base64.b64encode(page.data).decode("ascii"), "filename": page.name, "preset": self.preset,
                "max_tokens": self.max_tokens, "stream": True}
        sent = time.perf_counter()
        deltas = 0
        try:
            async with asyncio.timeout(self.timeout_s), self._http.stream("POST", self.url, json=body) as response:
                if response.status_code != 200:
                    record.error, record.detail = _http_error(response.status_code, await response.aread())
                    return
                async for line in response.aiter_lines():
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    kind = event.get("event")
                    if kind == "page" and event.get("delta"):
                        if record.ttft_s is None:
                            record.ttft_s = time.perf_counter() - sent
                        deltas += 1
                    elif kind == "error":
                        record.error, record.detail = event.get("code") or "app_error", str(event.get("message"))[:200]
                    elif kind == "done":
                        self._read_done(event, record, deltas)
            record.latency_s = time.perf_counter() - sent
            if record.error is None and record.output_tokens is None:
                record.error, record.detail = "stream_broken", "the answer ended without a done event"
        except TimeoutError:
            record.error, record.detail = "timeout", f"no complete answer within {self.timeout_s:g} s"
        except (httpx2.HTTPError, json.JSONDecodeError) as exc:
            record.error, record.detail = "app_unreachable", exc.__class__.__name__

    @staticmethod
    def _read_done(event: dict[str, Any], record: Record, deltas: int) -> None:
        pages = event.get("pages") or [{}]
        first = pages[0]
        if first.get("status") == "failed":
            record.error, record.detail = first.get("error_code") or "page_failed", str(first.get("error"))[:200]
        # The app reports tokens and waits per page when it knows them; else count streamed deltas.
        record.output_tokens = first.get("output_tokens") or deltas
        timings = first.get("timings") or {}
        record.queue_wait_s = timings.get("queue_wait_s")
        record.render_s = timings.get("render_s")
        record.app_ttft_s = timings.get("ttft_s")
        record.image_tokens = first.get("image_tokens")

    async def close(self) -> None:
        await self._http.aclose()


def _http_error(status: int, raw: bytes) -> tuple[str, str]:
    try:
        error = json.loads(raw).get("error") or {}
        code = error.get("code")  # the app's codes are words; vLLM's body (a wrong --url) carries the number
        return (code if isinstance(code, str) and code else f"http_{status}"), str(error.get("message") or "")[:200]
    except (ValueError, AttributeError):
        return f"http_{status}", raw[:200].decode("utf-8", "replace")
