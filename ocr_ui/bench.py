"""Load test: sweep concurrency against the engine or the app and record what a user would feel.

    python -m ocr_ui.bench --target engine --concurrency 1,4,16 --requests 32 --pages small,a4 \\
        --max-tokens 256 --ignore-eos --out bench-results/run1
    python -m ocr_ui.bench --target app --url http://127.0.0.1:7860 --duration 60 --files scan.pdf
    python -m ocr_ui.bench --concurrency 64,256 --requests 1024 --procs 4 --quiet   # past one process's CPU
    python -m ocr_ui.bench --baseline transformers --model-dir /models/hy --concurrency 1,8,16   # engine venv
    python -m ocr_ui.bench --preprocess                                   # preprocessing cost per page

Each request prints one JSON line (TTFT, latency, queue wait, output tokens, error code); each level
prints a summary line (req/s, output tok/s, TTFT and latency p50/p95, error rate). ``--out`` gets
results.jsonl, summary.json and curves.png. The run stops by itself: a bounded number of requests
(or seconds) per level, each request bounded by ``--timeout``. It only contacts the URL it is given
(default: the configured engine or app on loopback).

``--procs N`` splits each level (its concurrency and request count, as evenly as possible; a
``--duration`` applies to each process as given) over N worker processes that start together, since
one Python process tops out near 5,000 streamed chunks/s; the level's records are merged into one
summary, and each record names its ``worker``. Warm-up stays in the parent.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import itertools
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

from ocr_ui.bench_procs import run_split_level
from ocr_ui.bench_report import Record, summarize, summary_line, write_png
from ocr_ui.config import Settings, load_from_process
from ocr_ui.errors import OcrError
from ocr_ui.profiles import get_profile, image_tokens
from ocr_ui.prompts import TaskOptions, build_prompt, get_preset
from ocr_ui.synthetic_pages import SIZES, page_bytes


def _levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("use comma-separated whole numbers, e.g. 1,4,16") from None
    if not levels or min(levels) < 1 or max(levels) > 4096:
        raise argparse.ArgumentTypeError("each level must be between 1 and 4096")
    return levels


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ocr_ui.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--target", choices=["engine", "app"], default="engine", help="what to load (default engine)")
    p.add_argument("--url", default=None, help="engine base URL (…/v1) or app root; default from config")
    p.add_argument("--concurrency", type=_levels, default=[1, 4, 16], help="levels to sweep, e.g. 1,4,16")
    p.add_argument("--requests", type=int, default=None, help="requests per level (default 4 x level, at least 8)")
    p.add_argument("--duration", type=float, default=None, help="seconds per level instead of a request count")
    p.add_argument("--pages", default="small", help=f"synthetic pages, comma-separated: {', '.join(SIZES)}")
    p.add_argument("--files", nargs="*", default=[], help="real files to send instead of synthetic pages")
    p.add_argument("--preset", default="text", help="task preset (default text)")
    p.add_argument("--max-tokens", type=int, default=256, help="max_tokens per request (default 256)")
    p.add_argument("--ignore-eos", action="store_true", help="engine target: generate max_tokens every time")
    p.add_argument("--model", default=None, help="served model name (default from config)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one request may take (default 300)")
    p.add_argument("--warmup", type=int, default=1, help="unrecorded requests before the sweep (default 1)")
    p.add_argument("--out", default=None, help="folder for results.jsonl, summary.json, curves.png")
    p.add_argument("--quiet", action="store_true", help="no per-request lines on stdout")
    p.add_argument("--procs", type=int, default=1,
                   help="split each level over N load processes, 1-64, at most the level (default 1: in-process)")
    p.add_argument("--baseline", choices=["transformers"], default=None, help="in-process HF generate() instead")
    p.add_argument("--model-dir", default=None, help="checkpoint folder for --baseline transformers")
    p.add_argument("--preprocess", action="store_true", help="measure preprocessing cost per page and exit")
    p.add_argument("--repeat", type=int, default=5, help="runs per input for --preprocess (default 5)")
    return p


def _inputs(args: argparse.Namespace) -> list[tuple[str, bytes]]:
    if args.files:
        named = []
        for name in args.files:
            path = Path(name)
            if not path.is_file():
                raise OcrError(f"no such file: {path.name}")
            named.append((path.name, path.read_bytes()))
        return named
    kinds = [k.strip() for k in args.pages.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in SIZES]
    if unknown or not kinds:
        raise OcrError(f"unknown page size {', '.join(unknown) or '(none)'}; choose from {', '.join(SIZES)}")
    return [(kind, page_bytes(kind, seed=i)) for i, kind in enumerate(kinds)]


async def run_level(target: Any, pages: list[Any], concurrency: int, *, requests: int | None,
                    duration: float | None, emit: Any) -> tuple[list[Record], float]:
    """Keep ``concurrency`` requests in flight until ``requests`` were sent or ``duration`` passed."""
    if requests is None and duration is None:
        requests = max(8, 4 * concurrency)
    counter = itertools.count()
    records: list[Record] = []
    start = time.perf_counter()
    deadline = None if duration is None else start + duration

    async def worker() -> None:
        while True:
            index = next(counter)
            if (requests is not None and index >= requests) or (deadline is not None and time.perf_counter() >= deadline):
                return
            page = pages[index % len(pages)]
            record = Record(target.name, concurrency, index, page.name, time.perf_counter() - start)
            await target.run(page, record)
            records.append(record)
            emit(record)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return sorted(records, key=lambda r: r.index), time.perf_counter() - start


def _make_target(args: argparse.Namespace, settings: Settings, prompt: str) -> Any:
    from ocr_ui.bench_targets import AppTarget, EngineTarget

    if args.target == "app":
        url = args.url or f"http://127.0.0.1:{settings.app.port}"
        token = settings.app.api_tokens[0].get_secret_value() if settings.app.api_tokens else None
        return AppTarget(url, preset=args.preset, max_tokens=args.max_tokens, timeout_s=args.timeout, token=token)
    key = settings.engine.api_key.get_secret_value() if settings.engine.api_key else None
    if args.model:  # error messages name the model that was asked for
        settings = settings.model_copy(update={"model": settings.model.model_copy(update={"served_name": args.model})})
    return EngineTarget(settings, args.url or settings.engine.base_url, model=settings.model.served_name,
                        prompt=prompt, max_tokens=args.max_tokens, ignore_eos=args.ignore_eos,
                        timeout_s=args.timeout, api_key=key)


class _Sink:
    """Prints records and summaries as JSON lines and keeps them for the output folder."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.records: list[dict[str, Any]] = []
        self.extra: list[dict[str, Any]] = []

    def __call__(self, item: Record | dict[str, Any]) -> None:
        if isinstance(item, Record):
            self.records.append(item.as_dict())
            if not self.quiet:
                print(json.dumps(item.as_dict(), ensure_ascii=False), flush=True)
        else:
            self.extra.append(item)
            print(json.dumps(item), flush=True)


# Answers that no load explains: a wrong address, a missing token, a wrong model name. A sweep that gets
# them for every request measures nothing (a GPU run once sent 6,825 requests to a wrong path).
SETUP_ERRORS = frozenset({"http_401", "http_403", "http_404", "http_405", "access_denied", "engine_rejected"})
URL_HINTS = {"app": "--url for --target app is the app's own address, e.g. http://127.0.0.1:7860 (no /v1)",
             "engine": "--url for --target engine is the engine's OpenAI base URL, e.g. http://127.0.0.1:8000/v1"}


def _check_warmup(records: list[Record], target: str) -> None:
    """Stop before the sweep when every warm-up request failed with a setup error."""
    if records and all(r.error in SETUP_ERRORS for r in records):
        first = records[0]
        detail = f": {first.detail}" if first.detail else ""
        raise OcrError(f"the warm-up request failed ({first.error}{detail}); nothing was measured. "
                       f"{URL_HINTS[target]}.")


async def _sweep(args: argparse.Namespace, settings: Settings, sink: _Sink) -> list[dict[str, Any]]:
    from ocr_ui.bench_targets import prepare_pages, preset_prompt

    prompt = preset_prompt(settings, args.preset)
    pages = prepare_pages(_inputs(args), settings, prompt, args.max_tokens)
    target = _make_target(args, settings, prompt)
    summaries = []
    try:
        if args.warmup:
            warm, _ = await run_level(target, pages, 1, requests=args.warmup, duration=None, emit=lambda r: None)
            _check_warmup(warm, args.target)
        for level in args.concurrency:
            if min(args.procs, level) > 1:
                records, wall = await asyncio.to_thread(run_split_level, args, settings, prompt, level)
                for record in records:  # printed once the level is over, in start order
                    sink(record)
            else:
                records, wall = await run_level(target, pages, level, requests=args.requests,
                                                duration=args.duration, emit=sink)
            summary = summarize(records, level, wall)
            summaries.append(summary)
            print(json.dumps({"summary": summary}), flush=True)
            print(summary_line(summary), file=sys.stderr, flush=True)
    finally:
        await target.close()
    return summaries


def _baseline(args: argparse.Namespace, settings: Settings, sink: _Sink) -> list[dict[str, Any]]:
    from ocr_ui.bench_hf import run_transformers

    if not args.model_dir or not (Path(args.model_dir) / "config.json").is_file():
        raise OcrError("--baseline transformers needs --model-dir: a checkpoint folder with a config.json")
    profile = get_profile(settings.model.profile)
    prompt = build_prompt(profile, get_preset(profile.name, args.preset), TaskOptions())
    images = []
    for name, data in _inputs(args):
        image = _baseline_image(data, settings.images.max_side)
        width, height = image.size
        images.append((name, image, image_tokens(width, height, profile)))
    levels = run_transformers(args.model_dir, images, prompt=prompt, batch_sizes=args.concurrency,
                              requests=args.requests, max_tokens=args.max_tokens, emit=sink)
    summaries = [summarize(records, size, wall) for size, records, wall in levels]
    for summary in summaries:
        print(json.dumps({"summary": summary}), flush=True)
        print(summary_line(summary).replace("concurrency", "batch"), file=sys.stderr, flush=True)
    return summaries


def _baseline_image(data: bytes, max_side: int) -> Any:
    """The page at the size the app would send (within max_side, multiples of 32), without ``preprocess``.

    The engine environment has no pypdfium2, so the baseline takes images only.
    """
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(data)).convert("RGB")
    except (UnidentifiedImageError, OSError) as exc:
        raise OcrError("--baseline transformers takes image files only (PNG, JPEG, ...)") from exc
    scale = min(1.0, max_side / max(image.size))
    size = (max(32, int(image.width * scale) // 32 * 32), max(32, int(image.height * scale) // 32 * 32))
    return image.resize(size, Image.Resampling.LANCZOS) if size != image.size else image


def _write(out: Path, args: argparse.Namespace, sink: _Sink, summaries: list[dict[str, Any]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with (out / "results.jsonl").open("w", encoding="utf-8") as f:
        for record in sink.records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    target = args.baseline or args.target
    meta = {"target": target, "url": args.url, "pages": args.files or args.pages.split(","),
            "max_tokens": args.max_tokens, "ignore_eos": args.ignore_eos, "preset": args.preset,
            "requests": args.requests, "duration": args.duration, "procs": args.procs, "host": platform.node(),
            "python": platform.python_version(), "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "extra": sink.extra, "levels": summaries}
    (out / "summary.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False), encoding="utf-8")
    try:
        write_png(summaries, out / "curves.png", f"{target}: {', '.join(meta['pages'])}, max_tokens {args.max_tokens}")
    except ImportError:  # the engine environment (baseline runs) may lack matplotlib: keep the numbers
        print("note: matplotlib is not installed here; curves.png was not written", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; exit 2 with one ``error:`` line for bad arguments or config."""
    args = _parser().parse_args(argv)
    try:
        settings = load_from_process()  # config.yaml or $OCR_UI_CONFIG, plus OCR_UI__* overrides
        if args.preprocess:
            from ocr_ui.bench_preprocess import measure

            results = measure(settings, repeat=max(1, args.repeat))
            for result in results:
                print(json.dumps(result), flush=True)
            if args.out:
                Path(args.out).mkdir(parents=True, exist_ok=True)
                (Path(args.out) / "preprocess.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
            return 0
        if args.requests is not None and args.requests < 1:
            raise OcrError("--requests must be at least 1")
        if args.duration is not None and not 0 < args.duration <= 3600:
            raise OcrError("--duration must be between 0 and 3600 seconds")
        if not 1 <= args.procs <= 64:
            raise OcrError("--procs must be between 1 and 64")
        if args.procs > 1 and args.baseline:
            raise OcrError("--procs does not apply to --baseline (one process holds the model)")
        sink = _Sink(args.quiet)
        summaries = _baseline(args, settings, sink) if args.baseline else asyncio.run(_sweep(args, settings, sink))
    except OcrError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.out:
        _write(Path(args.out), args, sink, summaries)
    return 0


if __name__ == "__main__":
    sys.exit(main())
