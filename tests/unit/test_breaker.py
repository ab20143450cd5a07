"""The circuit breaker's state machine, driven by a fake clock (no sleeping)."""

from __future__ import annotations

import pytest

from ocr_ui.breaker import CircuitBreaker
from ocr_ui.config import load_config
from ocr_ui.errors import CircuitOpen, EngineBusy


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def breaker(clock: FakeClock, **kw: float) -> CircuitBreaker:
    return CircuitBreaker(**{"failures": 3, "reset_s": 10.0, **kw}, clock=clock)  # type: ignore[arg-type]


def test_a_closed_breaker_lets_requests_through(clock: FakeClock) -> None:
    b = breaker(clock)
    assert b.state == "closed" and b.check() is False and b.retry_after_s == 0


def test_it_opens_after_n_consecutive_failures(clock: FakeClock) -> None:
    b = breaker(clock)
    b.record_failure()
    b.record_failure()
    assert b.state == "closed"
    b.record_failure()
    assert b.state == "open"
    with pytest.raises(CircuitOpen, match=r"3 requests in a row failed.*Try again in about 10 s"):
        b.check()


def test_a_success_resets_the_failure_count(clock: FakeClock) -> None:
    b = breaker(clock)
    b.record_failure()
    b.record_failure()
    b.record_success()
    b.record_failure()
    b.record_failure()
    assert b.state == "closed"


def test_circuit_open_is_a_busy_error_for_the_api(clock: FakeClock) -> None:
    b = breaker(clock)
    b.trip("test")
    with pytest.raises(EngineBusy) as info:
        b.check()
    assert info.value.code == "circuit_open" and info.value.http_status == 503


def test_after_reset_s_exactly_one_probe_goes_through(clock: FakeClock) -> None:
    b = breaker(clock)
    b.trip("test")
    clock.advance(9.9)
    with pytest.raises(CircuitOpen):
        b.check()
    clock.advance(0.1)
    assert b.state == "half_open"
    assert b.check() is True  # the probe
    with pytest.raises(CircuitOpen):
        b.check()  # everyone else waits for the probe's verdict


def test_a_successful_probe_closes_the_circuit(clock: FakeClock) -> None:
    b = breaker(clock)
    b.trip("test")
    clock.advance(10)
    assert b.check() is True
    b.record_success(ttft_s=0.2)
    assert b.state == "closed" and b.check() is False


def test_a_failed_probe_opens_it_again_and_restarts_the_clock(clock: FakeClock) -> None:
    b = breaker(clock)
    b.trip("test")
    clock.advance(10)
    b.check()
    clock.advance(3)
    b.record_failure()
    assert b.state == "open" and b.reason == "the probe request failed"
    assert b.retry_after_s == pytest.approx(10)
    clock.advance(10)
    assert b.state == "half_open"


def test_a_probe_that_ends_without_a_verdict_lets_another_probe_through(clock: FakeClock) -> None:
    b = breaker(clock)
    b.trip("test")
    clock.advance(10)
    assert b.check() is True
    b.release_probe()
    assert b.check() is True


def test_a_high_median_time_to_first_token_opens_it(clock: FakeClock) -> None:
    b = breaker(clock, latency_s=2.0)
    for ttft in (0.5, 3.0, 3.0, 3.5):
        b.record_success(ttft_s=ttft)
    assert b.state == "closed"  # fewer than 5 samples: not judged yet
    b.record_success(ttft_s=2.5)
    assert b.state == "open" and "median time to first token 3.0 s" in b.reason


def test_one_slow_request_in_a_fast_window_does_not_open_it(clock: FakeClock) -> None:
    b = breaker(clock, latency_s=2.0)
    for ttft in (0.3, 0.4, 30.0, 0.3, 0.5, 0.4):
        b.record_success(ttft_s=ttft)
    assert b.state == "closed"


def test_latency_is_ignored_when_the_threshold_is_zero(clock: FakeClock) -> None:
    b = breaker(clock)
    for _ in range(10):
        b.record_success(ttft_s=100.0)
    assert b.state == "closed"


def test_a_hot_gpu_opens_it_and_keeps_it_open_until_it_cools(clock: FakeClock) -> None:
    b = breaker(clock, gpu_temp_c=85)
    b.observe_temperature(80)
    assert b.state == "closed"
    b.observe_temperature(91)
    assert b.state == "open" and "91 °C" in b.reason
    clock.advance(60)
    assert b.state == "open"  # still hot: no probe
    b.observe_temperature(70)
    assert b.state == "half_open"


def test_state_changes_are_reported(clock: FakeClock) -> None:
    b = breaker(clock)
    seen: list[str] = []
    b.on_change = seen.append
    b.trip("x")
    clock.advance(10)
    b.check()
    b.record_success()
    assert seen == ["open", "half_open", "closed"]


def test_from_settings_reads_the_admission_section(clock: FakeClock) -> None:
    settings = load_config(None, {"OCR_UI__ADMISSION__BREAKER_FAILURES": "2", "OCR_UI__ADMISSION__BREAKER_RESET_S": "4"})
    b = CircuitBreaker.from_settings(settings.admission, clock=clock)
    b.record_failure()
    b.record_failure()
    assert b.state == "open" and b.retry_after_s == pytest.approx(4)
