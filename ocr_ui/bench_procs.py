"""``--procs N``: one concurrency level of the load test spread over N worker processes.

One Python load process is one core: with typed SDK chunks it topped out near 5,000 streamed chunks/s
on the H200 host, which hid the engine's capacity at high concurrency (plain-dict chunks cost less, but
the ceiling is still there). Each worker builds its own target and runs ``bench.run_level`` on its
share of the level; all pass one start barrier, and the level's wall time runs from the earliest
worker start to the last worker end. The records come back to the parent, which prints and writes
them as it does for a 1-process level.

Workers render their own pages. A spawned child that dies while starting up (before it has read its
arguments) leaves ``Process.start()`` blocked on a full pipe, so what a child gets must stay small.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing
import queue
import time
from collections.abc import Callable
from typing import Any

from ocr_ui.bench_report import Record
from ocr_ui.config import Settings
from ocr_ui.errors import OcrError

STARTUP_S = 120.0  # spawn + imports (openai, pydantic) + the start barrier; seconds on a loaded host
MARGIN_S = 30.0  # closing the clients and sending the records back


def split(total: int, parts: int) -> list[int]:
    """``total`` over ``parts`` as evenly as possible, larger shares first (64 over 3 -> 22, 21, 21)."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def shares(level: int, procs: int, requests: int | None, duration: float | None) -> tuple[list[int], list[int] | None]:
    """Per-worker concurrency and request counts of one level (counts are None for a pure --duration level)."""
    if requests is None and duration is None:
        requests = max(8, 4 * level)  # run_level's default, for the level as a whole
    workers = min(procs, level, level if requests is None else requests)  # no idle worker
    return split(level, workers), None if requests is None else split(requests, workers)


def run_split_level(args: argparse.Namespace, settings: Settings, prompt: str, level: int,
                    *, entry: Callable[..., None] | None = None) -> tuple[list[Record], float]:
    """Run one level over ``min(args.procs, level)`` processes; the merged records and the level's wall time."""
    concurrency, counts = shares(level, args.procs, args.requests, args.duration)
    workers = len(concurrency)
    ctx = multiprocessing.get_context("spawn")  # never fork a process holding threads and an event loop
    results = ctx.Queue()
    barrier = ctx.Barrier(workers)
    procs = []
    for w in range(workers):
        first = sum(counts[:w]) if counts else w  # the worker's first page: the mix one process would send
        share = (w, args, settings, prompt, first, concurrency[w], counts[w] if counts else None, barrier, results)
        procs.append(ctx.Process(target=entry or _worker, args=share, name=f"bench-worker-{w}", daemon=True))
    budget = STARTUP_S + _run_bound(args, concurrency, counts) + MARGIN_S
    try:
        for proc in procs:
            proc.start()
        done = _collect(procs, results, time.monotonic() + budget, budget)
        for proc in procs:
            proc.join(timeout=10)  # each exits right after reporting
    finally:
        _stop(procs)
    return _merge(done, level)


def _run_bound(args: argparse.Namespace, concurrency: list[int], counts: list[int] | None) -> float:
    """Longest a worker's share can run: every slot finishes at least one request per --timeout."""
    bounds = []
    if args.duration is not None:
        bounds.append(args.duration + args.timeout)  # the last request may start just before the deadline
    if counts is not None:
        bounds.append(max(math.ceil(n / c) for n, c in zip(counts, concurrency, strict=True)) * args.timeout)
    return min(bounds)


def _collect(procs: list[Any], results: Any, deadline: float, budget: float) -> dict[int, tuple[Any, ...]]:
    """Each worker's (records, began, ended); a failed, dead or overdue worker raises ``OcrError``."""
    done: dict[int, tuple[Any, ...]] = {}
    while len(done) < len(procs):
        try:
            item = results.get(timeout=0.5)
        except queue.Empty:
            for w, proc in enumerate(procs):
                if w not in done and proc.exitcode not in (None, 0):
                    raise OcrError(f"load worker {w + 1} of {len(procs)} died (exit code {proc.exitcode})") from None
            if time.monotonic() > deadline:
                raise OcrError(f"load workers did not finish within {budget:g} s") from None
            continue
        if item[0] == "error":
            raise OcrError(f"load worker {item[1] + 1} of {len(procs)} failed: {item[2]}")
        done[item[1]] = item[2:]
    return done


def _stop(procs: list[Any]) -> None:
    """Terminate, then kill, any worker still running (after a failure elsewhere); reap them all."""
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    for proc in procs:
        if proc.pid is not None:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()


def _merge(done: dict[int, tuple[Any, ...]], level: int) -> tuple[list[Record], float]:
    """One level's records on one clock, numbered in start order as one process numbers them."""
    start = min(began for _, began, _ in done.values())
    wall = max(ended for _, _, ended in done.values()) - start
    merged = []
    for w, (records, began, _) in sorted(done.items()):
        for record in records:
            record.concurrency, record.worker = level, w
            record.started_s += began - start
            merged.append(record)
    merged.sort(key=lambda r: (r.started_s, r.worker, r.index))
    for index, record in enumerate(merged):
        record.index = index
    return merged, wall


def _worker(w: int, args: argparse.Namespace, settings: Settings, prompt: str, first: int, concurrency: int,
            requests: int | None, barrier: Any, results: Any) -> None:
    """A worker process: its own pages and target, the common start, its share of the level, the records back."""
    try:
        results.put(("ok", w, *asyncio.run(_share(args, settings, prompt, first, concurrency, requests, barrier))))
    except Exception as exc:  # the process boundary: report to the parent instead of dying with a traceback
        results.put(("error", w, f"{type(exc).__name__}: {exc}"))


async def _share(args: argparse.Namespace, settings: Settings, prompt: str, first: int, concurrency: int,
                 requests: int | None, barrier: Any) -> tuple[list[Record], float, float]:
    from ocr_ui.bench import _inputs, _make_target, run_level  # here, not at the top: bench imports this module
    from ocr_ui.bench_targets import prepare_pages

    pages = prepare_pages(_inputs(args), settings, prompt, args.max_tokens)
    first %= len(pages)
    pages = pages[first:] + pages[:first]
    target = _make_target(args, settings, prompt)
    try:
        await asyncio.to_thread(barrier.wait, STARTUP_S)
        began = time.time()  # wall clock: the one clock documented to agree across processes
        records, _ = await run_level(target, pages, concurrency, requests=requests, duration=args.duration,
                                     emit=lambda record: None)
        ended = time.time()
    finally:
        await target.close()
    return records, began, ended
