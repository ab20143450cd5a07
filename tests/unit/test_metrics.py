"""Metrics as Prometheus text: names, labels, units, the GPU collector and the Grafana dashboard."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from ocr_ui.errors import (
    CircuitOpen,
    CorruptFile,
    EngineBusy,
    EngineTimeout,
    EngineUnavailable,
    OcrError,
    RateLimited,
    StreamBroken,
)
from ocr_ui.metrics import OUTCOMES, Metrics, NvmlCollector, outcome_for

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"


class FakeNvml:
    """The slice of pynvml the collector uses, with two GPUs; the second cannot report utilisation."""

    NVML_TEMPERATURE_GPU = 0

    def __init__(self) -> None:
        self.inits = 0

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(used=(handle + 1) * 2**30, total=140 * 2**30, free=0)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        if handle == 1:
            raise RuntimeError("not supported on this device")
        return SimpleNamespace(gpu=87, memory=40)

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        return 61 + handle


class NoGpuNvml(FakeNvml):
    def nvmlInit(self) -> None:
        self.inits += 1
        raise RuntimeError("NVML Shared Library Not Found")


def _samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    body, content_type = metrics.render()
    assert content_type.startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_a_request_is_counted_by_preset_and_outcome_with_its_duration() -> None:
    m = Metrics(nvml=False)
    m.observe_request("markdown", "ok", 2.5)
    m.observe_request("markdown", "timeout", 30.0)
    s = _samples(m)
    assert s[("ocr_ui_requests_total", (("outcome", "ok"), ("preset", "markdown")))] == 1
    assert s[("ocr_ui_requests_total", (("outcome", "timeout"), ("preset", "markdown")))] == 1
    assert s[("ocr_ui_request_duration_seconds_count", (("preset", "markdown"),))] == 2
    assert s[("ocr_ui_request_duration_seconds_sum", (("preset", "markdown"),))] == 32.5
    assert s[("ocr_ui_request_duration_seconds_bucket", (("le", "3.0"), ("preset", "markdown")))] == 1


def test_latencies_tokens_pages_and_gauges() -> None:
    m = Metrics(nvml=False)
    m.observe_ttft(0.3)
    m.observe_queue_wait(0.02)
    m.page_done("ok")
    m.page_done("input_error")
    m.add_output_tokens("text", 120)
    m.add_output_tokens("text", 0)
    m.set_engine_up(True)
    m.set_breaker_open(True)
    m.set_engine_load(waiting=3, running=16, kv_usage=0.42)
    m.admission_decision("held")
    s = _samples(m)
    assert s[("ocr_ui_time_to_first_token_seconds_count", ())] == 1
    assert s[("ocr_ui_queue_wait_seconds_sum", ())] == pytest.approx(0.02)
    assert s[("ocr_ui_pages_total", (("outcome", "ok"),))] == 1
    assert s[("ocr_ui_pages_total", (("outcome", "busy"),))] == 0  # every outcome exists from the start
    assert s[("ocr_ui_output_tokens_total", (("preset", "text"),))] == 120
    assert s[("ocr_ui_engine_up", ())] == 1
    assert s[("ocr_ui_breaker_open", ())] == 1
    assert s[("ocr_ui_engine_waiting_requests", ())] == 3
    assert s[("ocr_ui_engine_running_requests", ())] == 16
    assert s[("ocr_ui_engine_kv_usage_ratio", ())] == 0.42
    assert s[("ocr_ui_admission_decisions_total", (("decision", "held"),))] == 1
    assert s[("ocr_ui_admission_decisions_total", (("decision", "rejected"),))] == 0


def test_in_flight_counts_open_requests_even_when_they_fail() -> None:
    m = Metrics(nvml=False)

    async def scenario() -> list[float]:
        seen = []
        with m.in_flight():
            with m.in_flight():
                seen.append(_samples(m)[("ocr_ui_in_flight_requests", ())])
            seen.append(_samples(m)[("ocr_ui_in_flight_requests", ())])
        try:
            with m.in_flight():
                raise StreamBroken("boom")
        except StreamBroken:
            pass
        seen.append(_samples(m)[("ocr_ui_in_flight_requests", ())])
        return seen

    assert asyncio.run(scenario()) == [2, 1, 0]


def test_unknown_outcome_is_a_loud_error_and_odd_presets_fold_into_other() -> None:
    m = Metrics(nvml=False)
    with pytest.raises(OcrError):
        m.observe_request("text", "weird", 1.0)
    with pytest.raises(OcrError):
        m.admission_decision("maybe")
    m.observe_request("Robert'); DROP TABLE--" * 3, "ok", 1.0)
    assert _samples(m)[("ocr_ui_requests_total", (("outcome", "ok"), ("preset", "other")))] == 1


@pytest.mark.parametrize(("exc", "outcome"), [
    (None, "ok"), (asyncio.CancelledError(), "stopped"), (CorruptFile("x"), "input_error"),
    (RateLimited("x"), "busy"), (EngineBusy("x"), "busy"), (CircuitOpen("x"), "busy"),
    (EngineTimeout("x"), "timeout"), (EngineUnavailable("x"), "engine_error"), (StreamBroken("x"), "engine_error"),
])
def test_outcome_for_maps_each_error_family(exc: BaseException | None, outcome: str) -> None:
    assert outcome_for(exc) == outcome
    assert outcome in OUTCOMES


def test_two_instances_do_not_collide_and_a_shared_registry_is_used() -> None:
    a, b = Metrics(nvml=False), Metrics(nvml=False)
    a.page_done("ok")
    assert _samples(b)[("ocr_ui_pages_total", (("outcome", "ok"),))] == 0
    registry = CollectorRegistry()
    c = Metrics(registry, nvml=False)
    assert c.registry is registry
    assert not any(name.startswith("process_") for name, _ in _samples(c))  # a caller's registry stays as given


def test_process_metrics_come_with_a_fresh_registry() -> None:
    assert any(name == "process_cpu_seconds_total" for name, _ in _samples(Metrics(nvml=False)))


def test_gpu_gauges_are_exported_from_nvml() -> None:
    fake = FakeNvml()
    m = Metrics(nvml_module=fake)
    s = _samples(m)
    assert s[("ocr_ui_gpu_memory_used_bytes", (("gpu", "0"),))] == 2**30
    assert s[("ocr_ui_gpu_memory_used_bytes", (("gpu", "1"),))] == 2 * 2**30
    assert s[("ocr_ui_gpu_memory_total_bytes", (("gpu", "1"),))] == 140 * 2**30
    assert s[("ocr_ui_gpu_utilization_ratio", (("gpu", "0"),))] == 0.87
    assert ("ocr_ui_gpu_utilization_ratio", (("gpu", "1"),)) not in s  # unsupported reading: absent, not 0
    assert s[("ocr_ui_gpu_temperature_celsius", (("gpu", "1"),))] == 62
    _samples(m)
    assert fake.inits == 1  # NVML is initialised once, not per scrape


class FakeNvmlV2(FakeNvml):
    """A newer driver: the v2 memory query leaves the driver's reserve out of 'used'."""

    nvmlMemory_v2 = 0x02000028

    def nvmlDeviceGetMemoryInfo(self, handle: int, version: int | None = None) -> SimpleNamespace:
        reserve = 0 if version == self.nvmlMemory_v2 else 600 * 2**20
        return SimpleNamespace(used=2**30 + reserve, total=140 * 2**30, reserved=600 * 2**20)


def test_memory_used_prefers_the_query_that_matches_nvidia_smi() -> None:
    assert _samples(Metrics(nvml_module=FakeNvmlV2()))[("ocr_ui_gpu_memory_used_bytes", (("gpu", "0"),))] == 2**30


def test_without_a_gpu_the_collector_exports_nothing_and_stops_trying() -> None:
    fake = NoGpuNvml()
    m = Metrics(nvml_module=fake)
    for _ in range(3):
        assert not any(name.startswith("ocr_ui_gpu_") for name, _ in _samples(m))
    assert fake.inits == 1
    assert NvmlCollector(NoGpuNvml()).read() == []


def test_on_this_machine_the_real_pynvml_path_does_not_fail() -> None:
    samples = _samples(Metrics())  # real pynvml import: a GPU gives gauges, no GPU gives none, never an error
    gpu_series = [name for name, _ in samples if name.startswith("ocr_ui_gpu_")]
    assert gpu_series == [] or "ocr_ui_gpu_memory_total_bytes" in gpu_series


def test_every_metric_name_is_in_base_units_with_the_prefix() -> None:
    m = Metrics(nvml_module=FakeNvml())
    names = {f.name for f in m.registry.collect() if f.name.startswith("ocr_ui_")}
    assert len(names) >= 17
    assert not [n for n in names if re.search(r"_(ms|milliseconds|mb|gb|percent)$", n)]


def _exported_names() -> set[str]:
    m = Metrics(nvml_module=FakeNvml())
    names = set()
    for family in m.registry.collect():
        names.add(family.name)
        names.update(s.name for s in family.samples)
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}.get(family.type, ())
        names.update(family.name + suffix for suffix in suffixes)
    return names


def test_the_grafana_dashboard_only_charts_metrics_that_exist() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert exprs
    referenced = {n for e in exprs for n in re.findall(r"\bocr_ui_[a-z_]+", e)}
    assert referenced, "the dashboard charts no ocr_ui metric"
    assert referenced <= _exported_names(), referenced - _exported_names()
    # ... and it charts every family of the app, plus vLLM's own load signals.
    families = {f.name for f in Metrics(nvml_module=FakeNvml()).registry.collect() if f.name.startswith("ocr_ui_")}
    charted = {f for f in families if any(r == f or r.startswith(f + "_") for r in referenced)}
    assert charted == families, families - charted
    text = " ".join(exprs)
    for vllm in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:time_to_first_token_seconds_bucket"):
        assert vllm in text


def test_the_grafana_dashboard_takes_its_datasource_from_a_variable() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
