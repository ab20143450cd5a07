"""Admission control: hold or refuse pages while the engine is saturated, degrade under pressure.

vLLM 0.26 queues without bound, so a burst of uploads turns into minutes of silent waiting. A
background sampler reads the engine's Prometheus ``/metrics`` every ``poll_interval_s`` (one request
per interval for the whole app, never per page) and each page passes through ``admit()``:

    async with admission.admit(page.image_tokens) as decision:   # may wait, or raise EngineBusy
        ... render at decision.max_side, ask for min(preset.max_tokens, decision.max_tokens) ...
        decision.first_token(ttft_s)                             # feeds the breaker's latency window

Leaving the block records the outcome with the circuit breaker: a ``BackendError`` from the body is a
failure (except ``EngineBusy`` and ``EngineRejected``: the app's own queue, or a page that does not
fit), normal exit a success; user errors and cancellation are neither. Code that catches a backend
error inside the block reports it with ``decision.fail(exc)``.

When the metrics cannot be read (engine starting, old vLLM), pages are admitted: the client's own
errors and the breaker cover a dead engine, and admission never blocks work on missing numbers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from ocr_ui.breaker import CircuitBreaker
from ocr_ui.config import Settings
from ocr_ui.errors import BackendError, EngineBusy, EngineRejected

log = logging.getLogger(__name__)

SUSTAINED_SAMPLES = 3  # "sustained pressure": this many samples in a row near the limits
NEAR_FRACTION = 0.5  # near the limits: waiting above half of max_waiting ...
NEAR_KV_MARGIN = 0.05  # ... or KV usage within this of max_kv_usage


@dataclass(frozen=True)
class EngineLoad:
    """One sample of the engine's /metrics, summed over its data-parallel ranks."""

    waiting: float
    running: float
    kv_usage: float  # 0-1, the mean over ranks (vLLM's DP balancer sends new work to the emptier one)
    at: float


GAUGES = ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc")


def parse_engine_metrics(text: str, at: float = 0.0) -> EngineLoad:
    """Read vLLM's gauges from Prometheus text; ``ValueError`` when they are missing or unparsable."""
    # vLLM's page is mostly histograms; it is read on the event loop every poll, so only the three
    # gauges' lines (and their # HELP / # TYPE lines) go through the parser.
    wanted = "\n".join(line for line in text.splitlines()
                       if line.startswith(GAUGES) or (line.startswith("#") and any(g in line for g in GAUGES)))
    sums: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(wanted + "\n"):
        if family.name in GAUGES:
            sums.setdefault(family.name, []).extend(s.value for s in family.samples)
    if "vllm:num_requests_waiting" not in sums or "vllm:num_requests_running" not in sums:
        raise ValueError("the engine's /metrics has no vllm:num_requests_waiting / running gauges")
    kv = sums.get("vllm:kv_cache_usage_perc") or [0.0]
    return EngineLoad(waiting=sum(sums["vllm:num_requests_waiting"]), running=sum(sums["vllm:num_requests_running"]),
                      kv_usage=sum(kv) / len(kv), at=at)


def metrics_url(base_url: str) -> str:
    """The server-root /metrics of an OpenAI base URL (``http://h:8000/v1`` -> ``http://h:8000/metrics``)."""
    root = base_url.rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    return root + "/metrics"


class HttpFetcher:
    """GETs ``url`` and returns its text (the default metrics source), over one kept-alive client.

    A client per poll built a new TLS context every time: ~19 ms of CPU on the event loop once a
    second (dev box profile at 64 clients), which every answer streaming at that moment waited for.
    """

    def __init__(self, url: str, timeout_s: float = 2.0) -> None:
        self.url, self.timeout_s = url, timeout_s
        self._http: Any = None  # an httpx2.AsyncClient, made on first use inside the running loop

    async def __call__(self) -> str:
        if self._http is None:
            import httpx2  # the openai SDK's own transport: no extra dependency

            self._http = httpx2.AsyncClient(timeout=self.timeout_s)
        response = await self._http.get(self.url)
        response.raise_for_status()
        return str(response.text)

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None


async def nvidia_smi_temperature() -> float | None:
    """The hottest visible GPU's temperature in °C, or None when nvidia-smi cannot tell."""
    try:
        proc = await asyncio.create_subprocess_exec(
            "nvidia-smi", "--query-gpu=temperature.gpu", "--format=csv,noheader,nounits",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        out, _ = await asyncio.wait_for(proc.communicate(), 10)
        return max(float(v) for v in out.split())
    except (OSError, ValueError, TimeoutError):
        return None


@dataclass
class Decision:
    """What admission decided for one page, and where its outcome is recorded."""

    priority: int
    degraded: bool
    max_side: int
    max_tokens: int
    waited_s: float
    probe: bool = False
    ttft_s: float | None = None
    outcome: str | None = field(default=None, repr=False)  # "success" | "failure" once recorded
    _breaker: CircuitBreaker | None = field(default=None, repr=False)

    def first_token(self, ttft_s: float) -> None:
        """The page's time to first token (judged by the breaker's latency threshold at the end)."""
        self.ttft_s = ttft_s

    def fail(self, exc: BaseException) -> None:
        """Record an error caught inside the block; engine errors count against the breaker."""
        if self.outcome is None and self._breaker is not None and counts_as_engine_failure(exc):
            self.outcome = "failure"
            self._breaker.record_failure()

    def succeed(self) -> None:
        """Record success now (leaving the block normally does the same)."""
        if self.outcome is None and self._breaker is not None:
            self.outcome = "success"
            self._breaker.record_success(self.ttft_s)


def counts_as_engine_failure(exc: BaseException) -> bool:
    """Engine trouble, not the app's own queue, an oversized page, the user's input or a cancel."""
    return isinstance(exc, BackendError) and not isinstance(exc, EngineBusy | EngineRejected)


class Admission:
    """Samples the engine's load in the background; ``admit()`` decides per page."""

    def __init__(self, settings: Settings, fetch_metrics: Callable[[], Awaitable[str]] | None = None,
                 clock: Callable[[], float] | None = None, metrics: Any = None,
                 breaker: CircuitBreaker | None = None,
                 read_gpu_temp: Callable[[], Awaitable[float | None]] | None = None) -> None:
        self.settings = settings
        self.cfg = settings.admission
        self._clock = clock or time.monotonic
        self._fetch = fetch_metrics or HttpFetcher(metrics_url(settings.engine.base_url))
        self.metrics = metrics
        self.breaker = breaker or CircuitBreaker.from_settings(self.cfg, clock=self._clock)
        self.breaker.on_change = self._breaker_changed
        # The temperature is read only when the breaker has a threshold (nvidia-smi costs ~50 ms).
        self._read_temp = read_gpu_temp or (nvidia_smi_temperature if self.cfg.breaker_gpu_temp_c > 0 else None)
        self.load: EngineLoad | None = None
        self.fetch_error: str | None = None
        self._near_streak = 0
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ the sampler

    async def start(self) -> None:
        """Start the background sampler (idempotent); call from the running event loop."""
        if (self.cfg.enabled or self._read_temp is not None) and (self._task is None or self._task.done()):
            self._task = asyncio.create_task(self._run(), name="admission-sampler")

    async def stop(self) -> None:
        """Stop the sampler and wait for it."""
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if isinstance(self._fetch, HttpFetcher):
            await self._fetch.aclose()

    async def _run(self) -> None:
        while True:
            await self.sample()
            await asyncio.sleep(self.cfg.poll_interval_s)

    async def sample(self) -> EngineLoad | None:
        """Read /metrics once and update the load (the sampler calls this; tests may too)."""
        try:
            load = parse_engine_metrics(await self._fetch(), at=self._clock())
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # any failure to read means "unknown load", never a crash of the sampler
            self.fetch_error = f"{exc.__class__.__name__}: {exc}"[:200]
            self.load = None
            self._near_streak = 0
            log.debug("engine metrics unavailable: %s", self.fetch_error)
        else:
            self.fetch_error = None
            self.load = load
            self._near_streak = self._near_streak + 1 if self._near(load) else 0
            self._mirror(load)
        if self._read_temp is not None:
            self.breaker.observe_temperature(await self._read_temp())
        self._changed.set()
        self._changed = asyncio.Event()
        return self.load

    def _fresh_load(self) -> EngineLoad | None:
        load = self.load
        if load is None or self._clock() - load.at > 5 * self.cfg.poll_interval_s + 5:
            return None  # stale: the sampler stopped or hangs; do not decide on old numbers
        return load

    def saturated(self, load: EngineLoad | None = None) -> bool:
        """True when the engine's queue or KV cache is over its limit."""
        load = load or self._fresh_load()
        return load is not None and (load.waiting > self.cfg.max_waiting or load.kv_usage > self.cfg.max_kv_usage)

    def _near(self, load: EngineLoad) -> bool:
        return (self.saturated(load) or load.waiting > self.cfg.max_waiting * NEAR_FRACTION
                or load.kv_usage > self.cfg.max_kv_usage - NEAR_KV_MARGIN)

    @property
    def under_pressure(self) -> bool:
        """Sustained pressure: near the limits for several samples in a row."""
        return self._near_streak >= SUSTAINED_SAMPLES and self._fresh_load() is not None

    # ------------------------------------------------------------------ per page

    def priority_for(self, image_tokens: int) -> int:
        """Slot priority of a page: 0 (first) for small pages when small_first, else 1."""
        if not self.cfg.small_first:
            return 0
        return 0 if image_tokens <= self.cfg.small_image_tokens else 1

    @asynccontextmanager
    async def admit(self, image_tokens: int) -> AsyncIterator[Decision]:
        """Admit one page (waiting while saturated); ``EngineBusy`` / ``CircuitOpen`` when it may not go."""
        try:
            probe = self.breaker.check()
        except EngineBusy:
            self._count("rejected")
            raise
        try:
            waited = await self._wait_until_room() if self.cfg.enabled else 0.0
        except BaseException:
            if probe:
                self.breaker.release_probe()
            raise
        degraded = self.cfg.enabled and self.cfg.degrade_under_pressure and (waited > 0 or self.under_pressure)
        decision = Decision(
            priority=self.priority_for(image_tokens), degraded=degraded, waited_s=waited, probe=probe,
            max_side=min(self.settings.images.max_side, self.cfg.degrade_max_side) if degraded
            else self.settings.images.max_side,
            max_tokens=min(self.settings.generation.max_tokens_cap, self.cfg.degrade_max_tokens) if degraded
            else self.settings.generation.max_tokens_cap,
            _breaker=self.breaker,
        )
        self._count("degraded" if degraded else ("held" if waited > 0 else "admitted"))
        try:
            yield decision
        except BaseException as exc:
            decision.fail(exc)
            raise
        else:
            decision.succeed()
        finally:
            if probe and decision.outcome is None:
                self.breaker.release_probe()

    async def _wait_until_room(self) -> float:
        """Hold while saturated, up to hold_timeout_s; the seconds waited."""
        if not self.saturated():
            return 0.0
        start = self._clock()
        deadline = time.monotonic() + self.cfg.hold_timeout_s
        while self.saturated():
            left = deadline - time.monotonic()
            if left <= 0:
                self._count("rejected")
                load = self.load
                queued = f" ({load.waiting:.0f} pages queued)" if load is not None else ""
                raise EngineBusy(f"The OCR engine is busy{queued}. Please try again in a minute.")
            with suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self._changed.wait()
        return max(self._clock() - start, 1e-6)

    # ------------------------------------------------------------------ reporting

    def snapshot(self) -> dict[str, Any]:
        """State for /healthz and logs."""
        load = self._fresh_load()
        return {
            "engine_waiting": None if load is None else load.waiting,
            "engine_running": None if load is None else load.running,
            "engine_kv_usage": None if load is None else load.kv_usage,
            "saturated": self.saturated(), "under_pressure": self.under_pressure,
            "breaker": self.breaker.state, "breaker_reason": self.breaker.reason or None,
            "metrics_error": self.fetch_error,
        }

    # The metrics object is duck-typed (ocr_ui.metrics.Metrics in the app); each call is skipped when absent.

    def _count(self, decision: str) -> None:
        record = getattr(self.metrics, "admission_decision", None)
        if record is not None:
            record(decision)

    def _mirror(self, load: EngineLoad) -> None:
        record = getattr(self.metrics, "set_engine_load", None)
        if record is not None:
            record(load.waiting, load.running, load.kv_usage)

    def _breaker_changed(self, state: str) -> None:
        record = getattr(self.metrics, "set_breaker_open", None)
        if record is not None:
            record(state != "closed")
