"""A circuit breaker in front of the engine: stop sending work to an engine that keeps failing.

closed --(N consecutive failures, median TTFT over the window too high, GPU too hot)--> open
open --(reset_s passed)--> half-open: exactly ONE probe request goes through
half-open --probe succeeds--> closed;  --probe fails--> open again (the reset clock restarts)

While open, callers get ``CircuitOpen`` at once instead of waiting on an engine that will not answer,
and the engine gets room to recover. The clock is injectable so tests never sleep.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable
from typing import Literal

from ocr_ui.config import AdmissionSettings
from ocr_ui.errors import CircuitOpen

State = Literal["closed", "open", "half_open"]


class CircuitBreaker:
    """Counts engine failures and latencies; ``check()`` raises ``CircuitOpen`` while the circuit is open."""

    def __init__(self, *, failures: int = 5, reset_s: float = 15.0, latency_s: float = 0.0,
                 latency_window: int = 20, latency_min_samples: int = 5, gpu_temp_c: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if failures < 1 or reset_s <= 0:
            raise ValueError("failures must be >= 1 and reset_s > 0")
        self.failures = failures
        self.reset_s = reset_s
        self.latency_s = latency_s  # 0 = off
        self.gpu_temp_c = gpu_temp_c  # 0 = off
        self.latency_min_samples = latency_min_samples
        self._clock = clock
        self._state: State = "closed"
        self._consecutive = 0
        self._opened_at = 0.0
        self._probe_out = False
        self._ttfts: deque[float] = deque(maxlen=latency_window)
        self._temperature: float | None = None
        self.reason = ""  # why it last opened, for logs and the health page
        self.on_change: Callable[[State], None] | None = None  # e.g. a metrics gauge

    @classmethod
    def from_settings(cls, admission: AdmissionSettings,
                      clock: Callable[[], float] = time.monotonic) -> CircuitBreaker:
        """Build from ``settings.admission`` (its breaker_* keys)."""
        return cls(failures=admission.breaker_failures, reset_s=admission.breaker_reset_s,
                   latency_s=admission.breaker_latency_s, gpu_temp_c=admission.breaker_gpu_temp_c, clock=clock)

    @property
    def state(self) -> State:
        """The current state; an open breaker whose reset time passed reads as half-open."""
        if self._state == "open" and self._clock() - self._opened_at >= self.reset_s and not self._too_hot():
            self._set("half_open")
        return self._state

    @property
    def retry_after_s(self) -> float:
        """Seconds until a probe may go through (0 when closed)."""
        if self._state != "open":
            return 0.0
        return max(0.0, self.reset_s - (self._clock() - self._opened_at))

    def check(self) -> bool:
        """Let a request through or raise ``CircuitOpen``; True when this request is the half-open probe."""
        state = self.state
        if state == "closed":
            return False
        if state == "half_open" and not self._probe_out:
            self._probe_out = True
            return True
        wait = max(1, round(self.retry_after_s)) if state == "open" else 1
        raise CircuitOpen(f"The OCR engine is failing ({self.reason}); requests are paused. "
                          f"Try again in about {wait} s.")

    def record_success(self, ttft_s: float | None = None) -> None:
        """A request finished well; ``ttft_s`` feeds the latency window."""
        if self._state == "half_open":
            self._probe_out = False
            self._ttfts.clear()  # judge latency afresh after recovering
            self._set("closed")
        self._consecutive = 0
        if ttft_s is not None and self.latency_s > 0:
            self._ttfts.append(ttft_s)
            if len(self._ttfts) >= self.latency_min_samples:
                median = statistics.median(self._ttfts)
                if median > self.latency_s:
                    self.trip(f"median time to first token {median:.1f} s is above {self.latency_s:g} s")

    def record_failure(self) -> None:
        """A request failed because of the engine (not the user's input, not a cancel)."""
        if self._state == "half_open":
            self._probe_out = False
            self.trip("the probe request failed")
            return
        self._consecutive += 1
        if self._state == "closed" and self._consecutive >= self.failures:
            self.trip(f"{self._consecutive} requests in a row failed")

    def release_probe(self) -> None:
        """The probe ended without a verdict (cancelled, bad input): let the next request probe."""
        self._probe_out = False

    def observe_temperature(self, celsius: float | None) -> None:
        """Latest GPU temperature; above the threshold the circuit opens and stays open while hot."""
        self._temperature = celsius
        if self._too_hot() and self._state != "open":
            self.trip(f"GPU temperature {celsius:.0f} °C is above {self.gpu_temp_c:g} °C")

    def trip(self, reason: str) -> None:
        """Open the circuit now (also restarts the reset clock)."""
        self.reason = reason
        self._opened_at = self._clock()
        self._consecutive = 0
        self._ttfts.clear()
        self._set("open")

    def _too_hot(self) -> bool:
        return self.gpu_temp_c > 0 and self._temperature is not None and self._temperature > self.gpu_temp_c

    def _set(self, state: State) -> None:
        changed = state != self._state
        self._state = state
        if state != "half_open":
            self._probe_out = False
        if changed and self.on_change is not None:
            self.on_change(state)
