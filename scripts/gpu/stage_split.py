"""Where one benchmark run's time went, from the before/after snapshots `h200.sh bench` writes.

    python scripts/gpu/stage_split.py RUN_DIR [ENGINE_LOG ...]

Prints the CPU seconds each process used during the run (as a share of one core over the run's wall
time) and the mean of vLLM's per-request stage histograms (queue, prefill, decode, TTFT, end to end)
over the run's requests. A process at ~100 % of a core is a ceiling; an engine TTFT far below the
client's says the time went before the engine core (in vLLM's API servers). Engine logs name the
processes: vLLM prefixes its lines with ``(ApiServer_1 pid=123)``.
"""
from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

STAGES = ("request_queue_time_seconds", "request_prefill_time_seconds", "request_decode_time_seconds",
          "time_to_first_token_seconds", "e2e_request_latency_seconds", "inter_token_latency_seconds")


def _text(path: Path) -> str:
    """A snapshot file, or its gzipped copy (how docs/bench keeps them)."""
    if path.is_file():
        return path.read_text(encoding="utf-8", errors="replace")
    return gzip.decompress(path.with_name(path.name + ".gz").read_bytes()).decode("utf-8", "replace")


def cpu_seconds(path: Path) -> dict[int, tuple[float, str]]:
    """pid -> (cumulative CPU seconds, command line) from `ps -eo pid,ppid,times,args`."""
    out: dict[int, tuple[float, str]] = {}
    for line in _text(path).splitlines():
        parts = line.split(None, 3)
        if len(parts) == 4:
            out[int(parts[0])] = (float(parts[2]), parts[3])
    return out


def thread_seconds(path: Path) -> dict[tuple[int, int], float]:
    """(pid, tid) -> cumulative CPU seconds from `ps -L -o pid,tid,time,comm` ([DD-]HH:MM:SS)."""
    out: dict[tuple[int, int], float] = {}
    for line in _text(path).splitlines():
        parts = line.split()
        if len(parts) >= 3:
            days, _, clock = parts[2].rpartition("-")
            h, m, sec = (int(x) for x in clock.split(":"))
            out[(int(parts[0]), int(parts[1]))] = ((int(days or 0) * 24 + h) * 60 + m) * 60 + sec
    return out


def histogram_totals(path: Path) -> dict[str, tuple[float, float]]:
    """name -> (sum, count), added over every label set (one per API server or engine)."""
    totals: dict[str, list[float]] = {}
    for line in _text(path).splitlines():
        m = re.match(r"vllm:(\w+)_(sum|count)(?:\{[^}]*\})? ([0-9.eE+-]+)$", line)
        if m and m.group(1) in STAGES:
            pair = totals.setdefault(m.group(1), [0.0, 0.0])
            pair[0 if m.group(2) == "sum" else 1] += float(m.group(3))
    return {k: (v[0], v[1]) for k, v in totals.items()}


def names_from_logs(logs: list[Path]) -> dict[int, str]:
    names: dict[int, str] = {}
    for log in logs:
        for m in re.finditer(r"\((\w+) pid=(\d+)\)", _text(log)):
            names[int(m.group(2))] = m.group(1)
    return names


def main(run: Path, logs: list[Path]) -> None:
    wall = json.loads((run / "summary.json").read_text(encoding="utf-8"))["levels"][-1]["wall_s"]
    before, after = cpu_seconds(run / "cpu-before.txt"), cpu_seconds(run / "cpu-after.txt")
    names = names_from_logs(logs)
    used = sorted(((after[p][0] - before.get(p, (0.0, ""))[0], p) for p in after), reverse=True)
    print(f"{run.name}: wall {wall:.1f} s")
    for secs, pid in used[:16]:
        if secs < 0.5:
            break
        label = names.get(pid, after[pid][1][:70])
        print(f"  pid {pid:>7} {label:<40} {secs:7.1f} CPU s  {100 * secs / wall:5.0f} % of a core")
    if any((run / name).is_file() for name in ("threads-after.txt", "threads-after.txt.gz")):
        # The engine cores' threads: is the main (scheduling) thread the one that is busy?
        t0, t1 = thread_seconds(run / "threads-before.txt"), thread_seconds(run / "threads-after.txt")
        for pid in sorted({p for p, _ in t1}):
            spent = {tid: t1[(p, tid)] - t0.get((p, tid), 0.0) for p, tid in t1 if p == pid}
            others = [v for tid, v in spent.items() if tid != pid]
            if spent.get(pid, 0.0) + sum(others) >= 0.5:
                print(f"  threads of {pid}: main {spent.get(pid, 0.0):.0f} CPU s, {sum(others):.0f} s in "
                      f"{sum(v >= 1 for v in others)} of {len(others)} others")
    h0, h1 = histogram_totals(run / "metrics-before.txt"), histogram_totals(run / "metrics-after.txt")
    for name in STAGES:
        if name in h1:
            s = h1[name][0] - h0.get(name, (0.0, 0.0))[0]
            n = h1[name][1] - h0.get(name, (0.0, 0.0))[1]
            if n > 0:
                print(f"  engine {name:<32} mean {1000 * s / n:8.1f} ms over {n:.0f}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]])
