"""Every Prometheus metric of the app, on an injectable registry (a fresh one per ``Metrics`` by default).

Names are ``ocr_ui_*`` in base units (seconds, bytes, ratios 0-1); labels are low-cardinality: ``preset``
(the preset keys), ``outcome`` (``OUTCOMES``), ``decision`` (admission), ``gpu`` (device index).
GPU gauges come from NVML (``nvidia-ml-py``) when an NVIDIA GPU is visible; without one they are absent.
``docs/grafana-dashboard.json`` charts these together with vLLM's own metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ocr_ui.errors import EngineBusy, EngineTimeout, InputError, OcrError, RateLimited

log = logging.getLogger(__name__)

# ok: answered; stopped: the user stopped it (or left); input_error: the user can fix it;
# engine_error: the engine failed; busy: refused or held too long by admission/slots; timeout: too slow.
OUTCOMES = ("ok", "stopped", "input_error", "engine_error", "busy", "timeout")
DECISIONS = ("admitted", "held", "degraded", "rejected")
_LABEL_VALUE = re.compile(r"^[a-z0-9_.-]{1,40}$")

# Buckets span a phone photo on an idle H200 (~0.1 s) to a long document page on a loaded small card.
_DURATION_BUCKETS = (0.25, 0.5, 1, 2, 3, 5, 8, 12, 20, 30, 45, 60, 90, 120, 180, 300, 600)
_TTFT_BUCKETS = (0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1, 1.5, 2, 3, 5, 8, 12, 20, 30, 60, 120)
_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120)


def outcome_for(exc: BaseException | None) -> str:
    """The ``outcome`` label for how a request ended (None = answered)."""
    if exc is None:
        return "ok"
    if isinstance(exc, asyncio.CancelledError | GeneratorExit):
        return "stopped"
    if isinstance(exc, RateLimited | EngineBusy):
        return "busy"
    if isinstance(exc, InputError):
        return "input_error"
    if isinstance(exc, EngineTimeout | TimeoutError):
        return "timeout"
    return "engine_error"


@dataclass(frozen=True)
class GpuSample:
    """One GPU's reading; a field is None when the driver does not report it."""

    index: int
    memory_used_bytes: float | None
    memory_total_bytes: float | None
    utilization_ratio: float | None
    temperature_celsius: float | None


class NvmlCollector(Collector):
    """GPU gauges read at scrape time through NVML; silently empty without an NVIDIA GPU or driver."""

    _FAMILIES = (
        ("ocr_ui_gpu_memory_used_bytes", "GPU memory in use (all processes).", "memory_used_bytes"),
        ("ocr_ui_gpu_memory_total_bytes", "GPU memory in total.", "memory_total_bytes"),
        ("ocr_ui_gpu_utilization_ratio", "Share of time the GPU was busy over the driver's last sample period (0-1).",
         "utilization_ratio"),
        ("ocr_ui_gpu_temperature_celsius", "GPU core temperature.", "temperature_celsius"),
    )

    def __init__(self, nvml: ModuleType | Any | None = None) -> None:
        self._nvml: Any = nvml
        self._ready: bool | None = None  # None: not tried yet; False: no GPU, never try again

    def _start(self) -> bool:
        if self._ready is None:
            try:
                if self._nvml is None:
                    import pynvml

                    self._nvml = pynvml
                self._nvml.nvmlInit()
                self._ready = True
            except Exception as exc:  # no driver / no library / no GPU: GPU gauges are simply absent
                log.debug("NVML unavailable: %s", exc)
                self._ready = False
        return self._ready

    def read(self) -> list[GpuSample]:
        """A reading of every visible GPU (empty without NVML); also used by the circuit breaker."""
        if not self._start():
            return []
        nv = self._nvml
        try:
            count = int(nv.nvmlDeviceGetCount())
        except Exception as exc:
            log.debug("NVML device count failed: %s", exc)
            return []
        samples = []
        for index in range(count):
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(index)
            except Exception:
                continue
            mem = _safe(lambda h=handle: _memory_info(nv, h))
            util = _safe(lambda h=handle: nv.nvmlDeviceGetUtilizationRates(h))
            temp = _safe(lambda h=handle: nv.nvmlDeviceGetTemperature(h, getattr(nv, "NVML_TEMPERATURE_GPU", 0)))
            samples.append(GpuSample(
                index=index,
                memory_used_bytes=float(mem.used) if mem is not None else None,
                memory_total_bytes=float(mem.total) if mem is not None else None,
                utilization_ratio=float(util.gpu) / 100.0 if util is not None else None,
                temperature_celsius=float(temp) if temp is not None else None,
            ))
        return samples

    def describe(self) -> Iterator[GaugeMetricFamily]:
        for name, doc, _ in self._FAMILIES:
            yield GaugeMetricFamily(name, doc, labels=["gpu"])

    def collect(self) -> Iterator[GaugeMetricFamily]:
        samples = self.read()
        if not samples:
            return
        for name, doc, attr in self._FAMILIES:
            family = GaugeMetricFamily(name, doc, labels=["gpu"])
            for s in samples:
                value = getattr(s, attr)
                if value is not None:
                    family.add_metric([str(s.index)], value)
            yield family


def _memory_info(nv: Any, handle: Any) -> Any:
    # The v2 query counts only allocations as used (as nvidia-smi shows it); v1 also counts the
    # driver's reserve, ~0.6 GB on an idle H200. Older drivers only have v1.
    version = getattr(nv, "nvmlMemory_v2", None)
    if version is not None:
        try:
            return nv.nvmlDeviceGetMemoryInfo(handle, version=version)
        except Exception as exc:  # the driver lacks v2: fall back to v1 below
            log.debug("NVML v2 memory query failed, using v1: %s", exc)
    return nv.nvmlDeviceGetMemoryInfo(handle)


def _safe(read: Any) -> Any:
    # One unsupported query (e.g. utilisation on a MIG slice) must not hide the other readings.
    try:
        return read()
    except Exception:
        return None


class Metrics:
    """The app's metrics; the service calls the small methods below, ``/metrics`` calls ``render``."""

    def __init__(self, registry: CollectorRegistry | None = None, *, nvml: bool = True,
                 nvml_module: ModuleType | Any | None = None, process: bool = True) -> None:
        fresh = registry is None
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.requests = Counter("ocr_ui_requests", "Pages answered or refused, by preset and outcome.",
                                ["preset", "outcome"], registry=r)
        self.request_duration = Histogram("ocr_ui_request_duration_seconds",
                                          "Time from request to last token (or failure), per page.",
                                          ["preset"], buckets=_DURATION_BUCKETS, registry=r)
        self.ttft = Histogram("ocr_ui_time_to_first_token_seconds",
                              "Time from sending a page to its first streamed token (includes the engine's queue).",
                              buckets=_TTFT_BUCKETS, registry=r)
        self.queue_wait = Histogram("ocr_ui_queue_wait_seconds",
                                    "Time a page waited in the app for an engine slot / admission.",
                                    buckets=_WAIT_BUCKETS, registry=r)
        self.in_flight_requests = Gauge("ocr_ui_in_flight_requests", "Engine requests the app has open now.",
                                        registry=r)
        self.pages = Counter("ocr_ui_pages", "Pages processed, by outcome.", ["outcome"], registry=r)
        self.output_tokens = Counter("ocr_ui_output_tokens", "Tokens generated by the engine, per preset.",
                                     ["preset"], registry=r)
        self.engine_up = Gauge("ocr_ui_engine_up", "1 when the engine's /health answers, else 0.", registry=r)
        self.admission_decisions = Counter("ocr_ui_admission_decisions", "Admission control decisions.",
                                           ["decision"], registry=r)
        self.breaker_open = Gauge("ocr_ui_breaker_open", "1 while the circuit breaker holds requests off.",
                                  registry=r)
        self.engine_waiting = Gauge("ocr_ui_engine_waiting_requests",
                                    "The engine's queue (vllm:num_requests_waiting) as last sampled.", registry=r)
        self.engine_running = Gauge("ocr_ui_engine_running_requests",
                                    "Requests the engine runs (vllm:num_requests_running) as last sampled.", registry=r)
        self.engine_kv_usage = Gauge("ocr_ui_engine_kv_usage_ratio",
                                     "The engine's KV-cache usage 0-1 (vllm:kv_cache_usage_perc) as last sampled.",
                                     registry=r)
        # Zero-valued series from the start, so rate() and dashboards work before the first failure.
        for outcome in OUTCOMES:
            self.pages.labels(outcome)
        for decision in DECISIONS:
            self.admission_decisions.labels(decision)
        self.gpus = NvmlCollector(nvml_module) if nvml else None
        if self.gpus is not None:
            r.register(self.gpus)
        if fresh and process:
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)

    @staticmethod
    def _label(value: str, allowed: tuple[str, ...] | None = None) -> str:
        if allowed is not None:
            if value not in allowed:
                raise OcrError(f"internal error: unknown metric label {value!r}")
            return value
        # Preset keys are a fixed set; anything else (a typo, an API caller's string) folds into "other".
        return value if _LABEL_VALUE.match(value) else "other"

    def observe_request(self, preset: str, outcome: str, duration_s: float) -> None:
        """One page finished (any outcome) after ``duration_s`` seconds."""
        preset = self._label(preset)
        self.requests.labels(preset, self._label(outcome, OUTCOMES)).inc()
        self.request_duration.labels(preset).observe(max(0.0, duration_s))

    def observe_ttft(self, seconds: float) -> None:
        """Time to the first streamed token of a page."""
        self.ttft.observe(max(0.0, seconds))

    def observe_queue_wait(self, seconds: float) -> None:
        """Time a page waited for a slot or admission before it was sent."""
        self.queue_wait.observe(max(0.0, seconds))

    def page_done(self, outcome: str) -> None:
        """Count one page by outcome."""
        self.pages.labels(self._label(outcome, OUTCOMES)).inc()

    def add_output_tokens(self, preset: str, n: int) -> None:
        """Add the tokens a page generated (from the engine's usage, or a count of chunks)."""
        if n > 0:
            self.output_tokens.labels(self._label(preset)).inc(n)

    @contextlib.contextmanager
    def in_flight(self) -> Iterator[None]:
        """Count an open engine request for the duration of the ``with`` block (works in async code)."""
        self.in_flight_requests.inc()
        try:
            yield
        finally:
            self.in_flight_requests.dec()

    def set_engine_up(self, up: bool) -> None:
        """Record the engine's health as last probed."""
        self.engine_up.set(1 if up else 0)

    def admission_decision(self, decision: str) -> None:
        """Count one admission decision (one of ``DECISIONS``)."""
        self.admission_decisions.labels(self._label(decision, DECISIONS)).inc()

    def set_breaker_open(self, is_open: bool) -> None:
        """Record whether the circuit breaker is open."""
        self.breaker_open.set(1 if is_open else 0)

    def set_engine_load(self, waiting: float, running: float, kv_usage: float) -> None:
        """Mirror the engine's load as the admission controller last sampled it."""
        self.engine_waiting.set(waiting)
        self.engine_running.set(running)
        self.engine_kv_usage.set(kv_usage)

    def render(self) -> tuple[bytes, str]:
        """The Prometheus text exposition and its content type, for ``GET /metrics``."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
