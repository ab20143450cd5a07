"""Read vLLM's own Prometheus metrics (the real text format, parsed by prometheus_client)."""

from __future__ import annotations

import threading
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

GENERATED = "vllm:generation_tokens_total"


def sample(root_url: str, name: str, **labels: str) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels``, in the engine's /metrics."""
    with urllib.request.urlopen(f"{root_url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == name and labels.items() <= s.labels.items())


def wait_until_idle(root_url: str, timeout: float = 20.0, interval: float = 0.5) -> float:
    """Wait until the engine stops generating: the generated-token counter holds still between two
    readings and nothing runs. Returns the counter; raises AssertionError if it keeps moving."""
    deadline = time.monotonic() + timeout
    last = sample(root_url, GENERATED)
    while time.monotonic() < deadline:
        time.sleep(interval)
        now = sample(root_url, GENERATED)
        if now == last and sample(root_url, "vllm:num_requests_running") == 0:
            return now
        last = now
    raise AssertionError(f"the engine was still generating after {timeout:g} s")


class Sampler:
    """Samples a gauge in a background thread while a workload runs; ``values`` holds every reading."""

    def __init__(self, root_url: str, name: str, interval: float = 0.05) -> None:
        self.root_url, self.name, self.interval = root_url, name, interval
        self.values: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.values.append(sample(self.root_url, self.name))
            self._stop.wait(self.interval)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
