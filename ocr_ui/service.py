"""The OCR job: pages -> prompts -> engine stream -> results per page. No gradio here.

``run`` is an async generator of ``JobUpdate`` snapshots, one after every streamed chunk, so a UI can
show the text growing token by token. Pages run one after another: a failed page keeps the others, but
an engine that is down (or a circuit breaker that is open) ends the job and marks the remaining pages
failed with the same message. Closing the generator (Stop, a browser that left) closes the engine
stream at once through ``contextlib.aclosing``, which aborts the request inside vLLM.

Each ``JobUpdate`` carries a fresh list of the job's ``PageResult`` objects; those objects keep
changing until the job ends, so a consumer that wants history copies them.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack, aclosing
from dataclasses import dataclass, field
from typing import Any, Literal

from ocr_ui import preprocess
from ocr_ui.client import EngineClient
from ocr_ui.config import Settings
from ocr_ui.errors import BackendError, CircuitOpen, EngineUnavailable, InputError, OcrError
from ocr_ui.metrics import outcome_for
from ocr_ui.postprocess import RepetitionGuard, trim_repetition
from ocr_ui.profiles import ModelProfile, get_profile
from ocr_ui.prompts import TaskOptions, build_messages, build_prompt, get_preset

Status = Literal["queued", "running", "done", "failed", "stopped"]
# Up to this size, an image upload's header is read, and a JPEG that is sent as it came is prepared
# (a 1/8-scale check decode and base64: ~1 ms per 200 KB on the dev box), on the event loop; PDFs and
# anything that is decoded, resized or re-encoded go to a thread.
INLINE_MAX_BYTES = 1 << 20
# Errors after which no later page can succeed either: stop the job instead of failing page by page.
JOB_STOPPING = (EngineUnavailable, CircuitOpen)


def _new_request_id() -> str:
    return uuid.uuid4().hex[:12]


def _kind_of(data: bytes) -> str:
    """The upload's sniffed type for a failure record; ``unknown`` when it is not one we read."""
    try:
        return preprocess.sniff(data)
    except InputError:
        return "unknown"


@dataclass(frozen=True)
class OcrRequest:
    """One upload and what to do with it."""

    data: bytes
    preset: str
    options: TaskOptions = field(default_factory=TaskOptions)
    pages: str | None = None  # a page range such as "1-3,5"; None = all (up to images.max_pages)
    request_id: str = field(default_factory=_new_request_id)
    max_tokens: int | None = None  # None = the preset's; always capped by generation.max_tokens_cap
    filename: str = ""


@dataclass
class PageResult:
    """The state of one page; ``error`` is safe to show, ``error_code`` is the stable machine name."""

    number: int
    status: Status = "queued"
    text: str = ""
    error: str | None = None
    error_code: str | None = None
    finish_reason: str | None = None  # "stop", "length", or "repetition" (the guard stopped a loop)
    width: int = 0
    height: int = 0
    source_width: int = 0
    source_height: int = 0
    image_tokens: int = 0
    output_tokens: int | None = None
    ttft_s: float | None = None
    elapsed_s: float | None = None
    trimmed: bool = False
    degraded: bool = False
    render_s: float | None = None  # decoding / rendering and encoding the page
    queue_wait_s: float | None = None  # held by admission control plus waiting for an engine slot


@dataclass
class JobUpdate:
    """A snapshot of the job: every page, which one is running (1-based position), and whether it ended."""

    request_id: str
    pages: list[PageResult]
    current: int
    total: int
    done: bool


@dataclass
class _Job:
    request: OcrRequest
    profile: ModelProfile
    prompt: str
    max_tokens: int
    budget: int
    doc: preprocess.Document
    pages: list[PageResult]

    def update(self, current: int, done: bool = False) -> JobUpdate:
        return JobUpdate(self.request.request_id, list(self.pages), current, len(self.pages), done)


def _set_queue_wait(result: PageResult, seconds: float) -> None:
    result.queue_wait_s = seconds


class OcrService:
    """Runs OCR jobs against the engine; ``metrics``, ``admission`` and ``recorder`` are optional (duck-typed).

    ``recorder`` (a ``records.FailureRecorder``) gets one record per failed page, and one per request
    refused before any page ran (bad input); a page the user stopped is no failure.
    """

    def __init__(self, settings: Settings, client: EngineClient, metrics: Any = None, admission: Any = None,
                 recorder: Any = None) -> None:
        self.settings = settings
        self.client = client
        self.metrics = metrics
        self.admission = admission
        self.recorder = recorder

    def _prepare(self, req: OcrRequest) -> _Job:
        """Everything that can be wrong with the input is found here, before any engine work."""
        s = self.settings
        profile = get_profile(s.model.profile)
        preset = get_preset(profile.name, req.preset)
        prompt = build_prompt(profile, preset, req.options, max_prompt_chars=s.generation.max_prompt_chars,
                              max_fields=s.generation.max_fields)
        max_tokens = min(req.max_tokens or preset.max_tokens, s.generation.max_tokens_cap)
        budget = preprocess.token_budget(s.engine.max_model_len, prompt, max_tokens)
        doc = preprocess.open_document(req.data, s.images, pages=req.pages)
        pages = [PageResult(number=n) for n in doc.selected]
        return _Job(req, profile, prompt, max_tokens, budget, doc, pages)

    async def run(self, req: OcrRequest) -> AsyncGenerator[JobUpdate, None]:
        """Stream the job's progress; raises ``InputError`` before the first update for bad input."""
        t0 = time.monotonic()
        kind = _kind_of(req.data)
        try:
            if len(req.data) <= INLINE_MAX_BYTES and kind not in ("pdf", "unknown"):
                # An image's header, read in well under 1 ms. Handed to a thread the same job waited a
                # median 5.6 ms (p90 16 ms) for the GIL while 16 answers streamed (dev box, paced engine).
                job = self._prepare(req)
            else:
                job = await asyncio.to_thread(self._prepare, req)  # a PDF's page count takes a moment: off the loop
        except InputError as exc:
            self._remember(req, kind, None, exc, elapsed_s=time.monotonic() - t0)
            raise
        try:
            yield job.update(0)
            for index, result in enumerate(job.pages, start=1):
                try:
                    async with aclosing(self._run_page(job, index, result)) as updates:
                        async for update in updates:
                            yield update
                except JOB_STOPPING as exc:
                    for later in job.pages[index:]:
                        self._fail(later, exc)
                        self._record(job, later, exc)
                    break
            yield job.update(len(job.pages), done=True)
        finally:
            for page in job.pages:  # a consumer that closed us still holds these objects: say what happened
                if page.status in ("queued", "running"):
                    page.status = "stopped"

    async def _run_page(self, job: _Job, index: int, result: PageResult) -> AsyncGenerator[JobUpdate, None]:
        """One page; a page-level failure is recorded on ``result``; job-stopping errors propagate."""
        s = self.settings
        t0 = time.monotonic()
        result.status = "running"
        error: BaseException | None = None
        try:
            yield job.update(index)
            page = await self._render(job, result.number, None)
            result.render_s = time.monotonic() - t0
            async with AsyncExitStack() as stack:
                max_tokens, priority = job.max_tokens, 0
                decision = None
                held = time.monotonic()
                if self.admission is not None:
                    decision = await stack.enter_async_context(self.admission.admit(page.image_tokens))
                    priority = decision.priority
                held = time.monotonic() - held
                if decision is not None and decision.degraded:
                    result.degraded = True
                    max_tokens = min(max_tokens, decision.max_tokens)
                    if max(page.width, page.height) > decision.max_side:
                        page = await self._render(job, result.number, decision.max_side)
                result.width, result.height = page.width, page.height
                result.source_width, result.source_height = page.source_width, page.source_height
                result.image_tokens = page.image_tokens
                sampling, extra_body = job.profile.sampling()
                extra_body = {**extra_body, "skip_special_tokens": True}
                if s.generation.ignore_eos:  # benchmarks on random weights only
                    extra_body["ignore_eos"] = True
                stream = self.client.stream(
                    build_messages(job.profile, job.prompt, page.data_url), max_tokens=max_tokens,
                    sampling=sampling, extra_body=extra_body,
                    request_id=f"{job.request.request_id}-p{result.number}", priority=priority,
                    on_sent=lambda waited: _set_queue_wait(result, held + waited))
                guard = RepetitionGuard(s.generation)
                async with aclosing(stream) as chunks:
                    async for chunk in chunks:
                        if chunk.text:
                            if result.ttft_s is None:
                                result.ttft_s = time.monotonic() - t0
                                if decision is not None:
                                    decision.first_token(result.ttft_s)
                            result.text += chunk.text
                        if chunk.finish_reason is not None:
                            result.finish_reason = chunk.finish_reason
                            result.output_tokens = chunk.output_tokens
                        if guard.feed(result.text):
                            result.finish_reason = "repetition"  # leaving the block closes the stream
                            break
                        yield job.update(index)
            result.text, result.trimmed = trim_repetition(result.text, min_repeats=s.generation.repeat_min_repeats)
            result.status = "done"
        except JOB_STOPPING as exc:
            error = exc
            self._fail(result, exc)
            raise
        except (BackendError, InputError) as exc:
            error = exc
            self._fail(result, exc)
        except BaseException as exc:  # Stop or a client that left: counted as "stopped", never swallowed
            error = exc
            raise
        finally:
            result.elapsed_s = time.monotonic() - t0
            self._record(job, result, error)
        yield job.update(index)

    async def _render(self, job: _Job, number: int, max_side: int | None) -> preprocess.Page:
        args = (job.request.data, job.doc, number, self.settings.images, job.profile)
        if len(job.request.data) <= INLINE_MAX_BYTES:
            page = preprocess.forwarded_page(*args, budget_tokens=job.budget, max_side=max_side)
            if page is not None:
                # ~1 ms of work. Handed to a thread it waited 18-34 ms for the GIL while 16 answers
                # streamed (H200 run, docs/benchmarks.md), all of it added to the time to first token.
                return page
        # Rendering a PDF page or resizing a photo takes tens of milliseconds: off the event loop.
        return await asyncio.to_thread(preprocess.render_page, *args, budget_tokens=job.budget, max_side=max_side)

    @staticmethod
    def _fail(result: PageResult, exc: BackendError | InputError) -> None:
        result.status, result.error, result.error_code = "failed", str(exc), exc.code

    def _record(self, job: _Job, result: PageResult, error: BaseException | None) -> None:
        preset = job.request.preset
        if isinstance(error, OcrError):
            self._remember(job.request, job.doc.kind, result.number, error, ttft_s=result.ttft_s,
                           elapsed_s=result.elapsed_s)
        if not self.metrics:
            return
        outcome = outcome_for(error)
        self.metrics.observe_request(preset, outcome, result.elapsed_s or 0.0)
        self.metrics.page_done(outcome)
        if result.output_tokens:
            self.metrics.add_output_tokens(preset, result.output_tokens)

    def _remember(self, req: OcrRequest, kind: str, page: int | None, error: OcrError, *,
                  ttft_s: float | None = None, elapsed_s: float | None = None) -> None:
        # A small append under the recorder's lock; kept inputs are written once per document hash.
        if self.recorder is not None:
            self.recorder.record(request_id=req.request_id, preset=req.preset, data=req.data, input_type=kind,
                                 error=error, page=page, ttft_s=ttft_s, elapsed_s=elapsed_s)

    async def run_to_end(self, req: OcrRequest) -> JobUpdate:
        """Run the whole job and return its last update (for the JSON API and tests)."""
        async with aclosing(self.run(req)) as updates:
            last = await anext(updates)  # run() yields at least once, or raises InputError
            async for update in updates:
                last = update
        return last

    async def health(self) -> dict[str, Any]:
        """The engine's state and the client's slots: ``{"engine": {...}, "slots": {...}}``."""
        state = await self.client.health()
        if self.metrics:
            self.metrics.set_engine_up(state.up)
        slots = self.client.slots
        report: dict[str, Any] = {
            "engine": {"up": state.up, "status": state.status, "detail": state.detail},
            "slots": {"in_use": slots.in_use, "waiting": slots.waiting, "limit": slots.limit},
        }
        if self.admission is not None and hasattr(self.admission, "snapshot"):
            report["admission"] = self.admission.snapshot()
        return report
