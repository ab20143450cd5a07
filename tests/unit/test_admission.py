"""Admission control on Prometheus text in vLLM's format, a fake clock and the app's real metrics."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from ocr_ui.admission import Admission, EngineLoad, counts_as_engine_failure, metrics_url, parse_engine_metrics
from ocr_ui.config import load_config
from ocr_ui.errors import (
    CircuitOpen,
    EngineBusy,
    EngineRejected,
    EngineTimeout,
    EngineUnavailable,
    InvalidOptions,
    StreamBroken,
)
from ocr_ui.metrics import Metrics

pytestmark = pytest.mark.anyio


def vllm_text(waiting: float = 0, running: float = 0, kv: float = 0.0, ranks: int = 1) -> str:
    """What vLLM 0.26 serves at /metrics (the parts admission reads, plus neighbours it must skip)."""
    lines = ["# HELP vllm:num_requests_running Number of requests in model execution batches.",
             "# TYPE vllm:num_requests_running gauge"]
    lines += [f'vllm:num_requests_running{{engine="{r}",model_name="m"}} {running / ranks}' for r in range(ranks)]
    lines += ["# TYPE vllm:num_requests_waiting gauge"]
    lines += [f'vllm:num_requests_waiting{{engine="{r}",model_name="m"}} {waiting / ranks}' for r in range(ranks)]
    # vLLM 0.26's breakdown of the same queue, whose name starts like the gauge's: never added in.
    lines += ["# HELP vllm:num_requests_waiting_by_reason Waiting requests by reason. Sum of all reasons equals "
              "vllm:num_requests_waiting.", "# TYPE vllm:num_requests_waiting_by_reason gauge"]
    lines += [f'vllm:num_requests_waiting_by_reason{{engine="{r}",model_name="m",reason="capacity"}} {waiting / ranks}'
              for r in range(ranks)]
    lines += ["# TYPE vllm:kv_cache_usage_perc gauge"]
    lines += [f'vllm:kv_cache_usage_perc{{engine="{r}",model_name="m"}} {kv}' for r in range(ranks)]
    lines += ["# TYPE vllm:prompt_tokens counter", 'vllm:prompt_tokens_total{engine="0",model_name="m"} 1234.0',
              "# TYPE vllm:time_to_first_token_seconds histogram",
              'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 3.0',
              'vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 5.0',
              'vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 5.0',
              'vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.9']
    return "\n".join(lines) + "\n"


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Source:
    """A settable /metrics body (or an error) handed to Admission as fetch_metrics."""

    def __init__(self, text: str = "") -> None:
        self.text = text or vllm_text()
        self.error: Exception | None = None
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self.text


def app_metrics() -> Metrics:
    return Metrics(CollectorRegistry(), nvml=False, process=False)


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def make(source: Source | None = None, clock: FakeClock | None = None, metrics: object = None,
         **admission: object) -> Admission:
    environ = {f"OCR_UI__ADMISSION__{k.upper()}": str(v) for k, v in
               {"hold_timeout_s": 0.3, "max_waiting": 10, **admission}.items()}
    return Admission(load_config(None, environ), fetch_metrics=source or Source(), clock=clock or FakeClock(),
                     metrics=metrics)


# ---------------------------------------------------------------------------- reading /metrics


def test_engine_gauges_are_summed_over_data_parallel_ranks_and_kv_is_averaged() -> None:
    load = parse_engine_metrics(vllm_text(waiting=6, running=32, kv=0.4, ranks=2), at=5.0)
    assert (load.waiting, load.running, load.kv_usage, load.at) == (6, 32, pytest.approx(0.4), 5.0)


def test_only_the_gauges_lines_are_parsed_on_a_full_size_page() -> None:
    # The poll runs on the event loop: a page of 40 histograms (~2,600 lines) took ~32 ms to parse
    # whole on the dev box. Histogram lines around the gauges must neither count nor break the read.
    noise = []
    for f in range(40):
        noise += [f"# HELP vllm:hist_{f}_seconds h", f"# TYPE vllm:hist_{f}_seconds histogram"]
        noise += [f'vllm:hist_{f}_seconds_bucket{{engine="0",le="{b}",model_name="m"}} {b}.0' for b in range(30)]
    text = "\n".join(noise) + "\n" + vllm_text(waiting=5, running=16, kv=0.25, ranks=2)
    assert parse_engine_metrics(text, at=1.0) == EngineLoad(waiting=5, running=16, kv_usage=0.25, at=1.0)


def test_metrics_without_the_vllm_gauges_are_refused() -> None:
    with pytest.raises(ValueError, match="num_requests_waiting"):
        parse_engine_metrics("# TYPE process_cpu_seconds counter\nprocess_cpu_seconds_total 3.0\n")


def test_the_metrics_url_is_at_the_server_root_not_under_v1() -> None:
    assert metrics_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/metrics"
    assert metrics_url("http://127.0.0.1:8000/v1/") == "http://127.0.0.1:8000/metrics"
    assert metrics_url("http://gpu-box:9000") == "http://gpu-box:9000/metrics"


async def test_a_sample_mirrors_the_engine_gauges_into_our_metrics() -> None:
    metrics = app_metrics()
    adm = make(Source(vllm_text(waiting=3, running=16, kv=0.25)), metrics=metrics)
    await adm.sample()
    assert value(metrics, "ocr_ui_engine_waiting_requests") == 3
    assert value(metrics, "ocr_ui_engine_running_requests") == 16
    assert value(metrics, "ocr_ui_engine_kv_usage_ratio") == 0.25


# ---------------------------------------------------------------------------- admitting


async def test_an_idle_engine_admits_at_once_with_full_settings() -> None:
    metrics = app_metrics()
    adm = make(metrics=metrics)
    await adm.sample()
    async with adm.admit(500) as decision:
        assert not decision.degraded and decision.waited_s == 0
        assert decision.max_side == 2048 and decision.max_tokens == 4096
    assert value(metrics, "ocr_ui_admission_decisions_total", decision="admitted") == 1


async def test_a_long_engine_queue_holds_the_page_then_refuses_it_with_a_clear_message() -> None:
    metrics = app_metrics()
    adm = make(Source(vllm_text(waiting=40, running=16)), metrics=metrics)
    await adm.sample()
    with pytest.raises(EngineBusy, match=r"busy \(40 pages queued\)\. Please try again in a minute\.") as info:
        async with adm.admit(500):
            pytest.fail("a saturated engine must not admit")
    assert info.value.http_status == 503
    assert value(metrics, "ocr_ui_admission_decisions_total", decision="rejected") == 1


async def test_a_full_kv_cache_also_holds_pages() -> None:
    adm = make(Source(vllm_text(waiting=0, running=16, kv=0.99)), hold_timeout_s=0)
    await adm.sample()
    assert adm.saturated()
    with pytest.raises(EngineBusy):
        async with adm.admit(500):
            pass


async def test_a_held_page_goes_when_the_queue_drains_and_is_degraded() -> None:
    source = Source(vllm_text(waiting=40))
    adm = make(source, hold_timeout_s=30)
    await adm.sample()

    async def drain() -> None:
        await asyncio.sleep(0.05)
        source.text = vllm_text(waiting=2)
        await adm.sample()

    drainer = asyncio.create_task(drain())
    async with adm.admit(500) as decision:
        assert decision.waited_s > 0 and decision.degraded
        assert decision.max_side == 1280 and decision.max_tokens == 2048
    await drainer


async def test_sustained_pressure_degrades_pages_without_holding_them() -> None:
    source = Source(vllm_text(waiting=7))  # above half of max_waiting 10, below the limit
    adm = make(source)
    for _ in range(3):
        await adm.sample()
    assert adm.under_pressure and not adm.saturated()
    async with adm.admit(500) as decision:
        assert decision.degraded and decision.waited_s == 0 and decision.max_side == 1280


async def test_brief_pressure_is_not_sustained() -> None:
    source = Source(vllm_text(waiting=7))
    adm = make(source)
    await adm.sample()
    await adm.sample()
    source.text = vllm_text(waiting=0)
    await adm.sample()
    async with adm.admit(500) as decision:
        assert not decision.degraded


async def test_degrading_can_be_turned_off() -> None:
    adm = make(Source(vllm_text(waiting=7)), degrade_under_pressure="false")
    for _ in range(4):
        await adm.sample()
    async with adm.admit(500) as decision:
        assert not decision.degraded and decision.max_side == 2048


async def test_unreadable_metrics_admit_pages_and_say_why() -> None:
    source = Source()
    source.error = ConnectionRefusedError("refused")
    adm = make(source)
    await adm.sample()
    async with adm.admit(500) as decision:
        assert not decision.degraded
    assert "ConnectionRefusedError" in adm.snapshot()["metrics_error"]


async def test_stale_samples_are_not_trusted() -> None:
    clock = FakeClock()
    adm = make(Source(vllm_text(waiting=99)), clock=clock, hold_timeout_s=0)
    await adm.sample()
    assert adm.saturated()
    clock.now += 60  # the sampler stopped a minute ago
    assert not adm.saturated()
    async with adm.admit(500):
        pass


async def test_disabled_admission_ignores_the_engine_load() -> None:
    adm = make(Source(vllm_text(waiting=99)), enabled="false", hold_timeout_s=0)
    await adm.sample()
    async with adm.admit(500) as decision:
        assert not decision.degraded


def test_small_pages_get_the_front_priority_when_small_first() -> None:
    adm = make()
    assert adm.priority_for(800) == 0 and adm.priority_for(1200) == 0 and adm.priority_for(1201) == 1
    assert make(small_first="false").priority_for(5000) == 0


# ---------------------------------------------------------------------------- the breaker


def test_only_engine_errors_count_against_the_breaker() -> None:
    assert counts_as_engine_failure(EngineTimeout("t")) and counts_as_engine_failure(StreamBroken("s"))
    assert counts_as_engine_failure(EngineUnavailable("u"))
    assert not counts_as_engine_failure(EngineBusy("b")) and not counts_as_engine_failure(EngineRejected("r"))
    assert not counts_as_engine_failure(InvalidOptions("i")) and not counts_as_engine_failure(asyncio.CancelledError())


async def test_repeated_engine_failures_open_the_circuit_for_the_next_pages() -> None:
    metrics = app_metrics()
    adm = make(metrics=metrics, breaker_failures=2)
    for _ in range(2):
        with pytest.raises(StreamBroken):
            async with adm.admit(500):
                raise StreamBroken("the stream stopped")
    assert value(metrics, "ocr_ui_breaker_open") == 1
    with pytest.raises(CircuitOpen, match="2 requests in a row failed"):
        async with adm.admit(500):
            pytest.fail("an open circuit must not admit")
    assert value(metrics, "ocr_ui_admission_decisions_total", decision="rejected") == 1


async def test_user_errors_and_cancels_inside_the_block_do_not_count() -> None:
    adm = make(breaker_failures=1)
    with pytest.raises(InvalidOptions):
        async with adm.admit(500):
            raise InvalidOptions("bad")
    with pytest.raises(asyncio.CancelledError):
        async with adm.admit(500):
            raise asyncio.CancelledError
    assert adm.breaker.state == "closed"


async def test_a_failure_caught_inside_the_block_is_reported_with_decision_fail() -> None:
    adm = make(breaker_failures=1)
    async with adm.admit(500) as decision:
        decision.fail(EngineTimeout("no answer"))
    assert adm.breaker.state == "open"


async def test_time_to_first_token_feeds_the_latency_breaker() -> None:
    adm = make(breaker_latency_s=1.0)
    for _ in range(5):
        async with adm.admit(500) as decision:
            decision.first_token(4.0)
    assert adm.breaker.state == "open" and "time to first token" in adm.snapshot()["breaker_reason"]


async def test_after_reset_one_probe_page_goes_and_its_success_closes_the_circuit() -> None:
    clock = FakeClock()
    adm = make(clock=clock, breaker_reset_s=10)
    adm.breaker.trip("test")
    clock.now += 10
    async with adm.admit(500) as probe:
        assert probe.probe
        with pytest.raises(CircuitOpen):
            async with adm.admit(500):
                pass
    assert adm.breaker.state == "closed"


async def test_a_hot_gpu_opens_the_circuit_at_the_next_sample() -> None:
    async def hot() -> float:
        return 92.0

    environ = {"OCR_UI__ADMISSION__BREAKER_GPU_TEMP_C": "85"}
    adm = Admission(load_config(None, environ), fetch_metrics=Source(), read_gpu_temp=hot)
    await adm.sample()
    with pytest.raises(CircuitOpen, match="92 °C"):
        async with adm.admit(500):
            pass


# ---------------------------------------------------------------------------- the sampler


async def test_the_sampler_polls_until_stopped() -> None:
    source = Source()
    adm = make(source, poll_interval_s=0.01)
    await adm.start()
    await adm.start()  # idempotent: still one sampler
    for _ in range(200):
        if source.calls >= 3:
            break
        await asyncio.sleep(0.01)
    await adm.stop()
    calls = source.calls
    assert calls >= 3 and adm.load is not None
    await asyncio.sleep(0.05)
    assert source.calls == calls
