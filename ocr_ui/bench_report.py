"""Load-test records, their per-level summary and the curves PNG (throughput, latency, errors by concurrency).

The vocabulary follows ``/metrics``: time to first token, latency (request to last token), queue wait
(time the app held the page before sending it), output tokens.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Record:
    """One request of the load test."""

    target: str  # "engine" | "app" | "transformers"
    concurrency: int
    index: int
    page: str  # the page's name (small, a4, big, or a file name)
    started_s: float  # since the level began
    latency_s: float | None = None
    ttft_s: float | None = None
    queue_wait_s: float | None = None  # through the app: held by admission + waiting for an engine slot
    render_s: float | None = None  # through the app: the app preparing the page (decode, resize, encode)
    app_ttft_s: float | None = None  # through the app: its own clock, page start to the engine's first text
    output_tokens: int | None = None
    image_tokens: int | None = None
    error: str | None = None  # an error code (engine_timeout, http_503, ...) or None
    detail: str | None = field(default=None, repr=False)  # a short, safe message for the error
    worker: int = 0  # which --procs worker process sent it (0 in a 1-process run)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, with times rounded to the millisecond."""
        out = asdict(self)
        for key in ("started_s", "latency_s", "ttft_s", "queue_wait_s", "render_s", "app_ttft_s"):
            if out[key] is not None:
                out[key] = round(out[key], 4)
        return out


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) with linear interpolation; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 1)


def summarize(records: list[Record], concurrency: int, wall_s: float) -> dict[str, Any]:
    """One level's numbers: rates over its wall time, percentiles of the successful requests."""
    ok = [r for r in records if r.error is None]
    tokens = sum(r.output_tokens or 0 for r in ok)
    ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
    latency = [r.latency_s for r in ok if r.latency_s is not None]
    wait = [r.queue_wait_s for r in ok if r.queue_wait_s is not None]
    render = [r.render_s for r in ok if r.render_s is not None]
    app_ttft = [r.app_ttft_s for r in ok if r.app_ttft_s is not None]
    wall = max(wall_s, 1e-9)
    return {
        "concurrency": concurrency, "requests": len(records), "ok": len(ok), "errors": len(records) - len(ok),
        "error_rate": round((len(records) - len(ok)) / len(records), 4) if records else 0.0,
        "error_kinds": dict(Counter(r.error for r in records if r.error is not None)),
        "wall_s": round(wall_s, 3), "req_per_s": round(len(ok) / wall, 3),
        "output_tokens": tokens, "output_tok_per_s": round(tokens / wall, 1),
        "ttft_p50_ms": _ms(percentile(ttft, 50)), "ttft_p95_ms": _ms(percentile(ttft, 95)),
        "latency_p50_ms": _ms(percentile(latency, 50)), "latency_p95_ms": _ms(percentile(latency, 95)),
        "queue_wait_p50_ms": _ms(percentile(wait, 50)), "queue_wait_p95_ms": _ms(percentile(wait, 95)),
        "render_p50_ms": _ms(percentile(render, 50)), "render_p95_ms": _ms(percentile(render, 95)),
        # The client's TTFT minus this is the HTTP exchange with the app: upload, opening it, the first line back.
        "app_ttft_p50_ms": _ms(percentile(app_ttft, 50)),
    }


def summary_line(s: dict[str, Any]) -> str:
    """A one-line human summary of a level."""
    def num(value: object) -> str:
        return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)

    return (f"concurrency {s['concurrency']:>4}: {s['ok']}/{s['requests']} ok, {num(s['req_per_s'])} req/s, "
            f"{num(s['output_tok_per_s'])} output tok/s, TTFT p50/p95 {num(s['ttft_p50_ms'])}/"
            f"{num(s['ttft_p95_ms'])} ms, latency p50/p95 {num(s['latency_p50_ms'])}/{num(s['latency_p95_ms'])} ms, "
            f"errors {s['error_rate']:.1%}")


def write_png(summaries: list[dict[str, Any]], path: Path, title: str) -> None:
    """Throughput, latency percentiles and error rate against concurrency, as one PNG."""
    import matplotlib

    matplotlib.use("Agg")  # no display: render straight to a file
    import matplotlib.pyplot as plt

    levels = [s["concurrency"] for s in summaries]

    def series(key: str) -> list[float]:
        return [math.nan if s[key] is None else s[key] for s in summaries]

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    ax = axes[0]
    ax.plot(levels, series("req_per_s"), "o-", label="requests/s")
    ax.set_ylabel("requests / s")
    twin = ax.twinx()
    twin.plot(levels, series("output_tok_per_s"), "s--", color="tab:orange", label="output tokens/s")
    twin.set_ylabel("output tokens / s")
    ax.set_title("throughput")
    ax.legend(loc="upper left")
    twin.legend(loc="lower right")
    ax = axes[1]
    for key, style in (("ttft_p50_ms", "o-"), ("ttft_p95_ms", "o--"), ("latency_p50_ms", "s-"),
                       ("latency_p95_ms", "s--")):
        ax.plot(levels, series(key), style, label=key.replace("_ms", "").replace("_", " "))
    ax.set_ylabel("ms")
    ax.set_title("latency")
    ax.legend()
    ax = axes[2]
    errors = [100 * s["error_rate"] for s in summaries]
    ax.plot(levels, errors, "o-", color="tab:red")
    ax.set_ylabel("% of requests")
    ax.set_ylim(0, max(5.0, 1.2 * max(errors, default=0)))
    ax.set_title("errors")
    for ax in axes:
        ax.set_xlabel("concurrent requests")
        ax.set_xscale("log", base=2)
        ax.set_xticks(levels, [str(level) for level in levels])
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
