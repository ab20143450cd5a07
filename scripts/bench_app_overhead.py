"""The app's CPU cost per streamed chunk, on a CPU-only machine: fake engine -> app -> load test.

    .venv/bin/python scripts/bench_app_overhead.py --requests 160 --concurrency 16 --chunks 256
    .venv/bin/python scripts/bench_app_overhead.py --profile /tmp/app.prof   # also cProfile the app

Three processes, so the app's own CPU time can be read apart from the engine's and the client's:
the scripted engine (``tests/support/fake_engine.py``, no delays, ``--chunks`` pieces per answer),
``python app.py`` pointed at it (ignore_eos, max_tokens_cap = chunks), and ``python -m ocr_ui.bench``.
The engine is loaded directly first (``--target engine``: what the fake alone can stream), then through
the app (``--target app``); the app process's user+system CPU seconds (psutil) around the app run,
divided by the chunks it streamed, is the number this script is for. It prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent


def serve_fake(args: argparse.Namespace, port_file: str) -> None:
    """The child process: the fake engine answering every request with ``args.chunks`` distinct tokens.

    They go ``args.stream_interval`` to a chunk (vLLM's ``--stream-interval``), one chunk per
    ``token_delay`` x interval seconds after ``first_token_delay`` (0 and 0: all at once).
    """
    sys.path.insert(0, str(ROOT))
    from tests.support.fake_engine import FakeEngine, Reply

    # Distinct words, so the repetition guard sees no loop; mixed scripts, as OCR output is.
    tokens = [f"w{i:03d}字 " for i in range(args.chunks)]
    n = args.stream_interval
    pieces = ["".join(tokens[i:i + n]) for i in range(0, len(tokens), n)]
    with FakeEngine() as fake:
        fake.default = Reply(chunks=pieces, first_token_delay=args.first_token_delay,
                             token_delay=args.token_delay * n)
        Path(port_file).write_text(str(fake.port))
        signal.sigwait({signal.SIGTERM, signal.SIGINT})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"process for {url} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{url} did not answer within {timeout:g} s")


def _warmup(args: argparse.Namespace) -> int:
    # The load tool warms up one request at a time: with a paced engine, 64 of them took ~85 s.
    return args.concurrency if args.token_delay == 0 else min(args.concurrency, 4)


def _bench(target: str, url: str, args: argparse.Namespace, env: dict[str, str]) -> dict[str, object]:
    cmd = [sys.executable, "-m", "ocr_ui.bench", "--target", target, "--url", url, "--concurrency",
           str(args.concurrency), "--requests", str(args.requests), "--max-tokens", str(args.chunks),
           "--ignore-eos", "--quiet", "--warmup", str(_warmup(args))] + (["--files", args.file] if args.file else [])
    out = subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, text=True).stdout
    return next(json.loads(line)["summary"] for line in out.splitlines() if line.startswith('{"summary"'))


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=160, help="measured requests per target (default 160)")
    p.add_argument("--concurrency", type=int, default=16, help="clients at once (default 16)")
    p.add_argument("--chunks", type=int, default=256, help="tokens per answer = max_tokens (default 256)")
    p.add_argument("--stream-interval", type=int, default=1, help="tokens per streamed chunk (default 1)")
    p.add_argument("--token-delay", type=float, default=0.0,
                   help="seconds per token, paced like a GPU (0.005 = 200 tokens/s per answer; default 0: at once)")
    p.add_argument("--first-token-delay", type=float, default=0.0, help="seconds before the first chunk (default 0)")
    p.add_argument("--file", default=None, help="send this file instead of the synthetic small PNG page")
    p.add_argument("--profile", default=None, help="run the app under cProfile and write the stats here")
    p.add_argument("--serve-fake", default=None, help=argparse.SUPPRESS)  # internal: the engine child
    args = p.parse_args()
    if args.serve_fake:
        serve_fake(args, args.serve_fake)
        return 0

    tmp = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    port_file = tmp / "engine-port"
    fake = subprocess.Popen([sys.executable, __file__, "--chunks", str(args.chunks), "--serve-fake", str(port_file),
                             "--stream-interval", str(args.stream_interval), "--token-delay", str(args.token_delay),
                             "--first-token-delay", str(args.first_token_delay)])
    app: subprocess.Popen[bytes] | None = None
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text():
            if time.monotonic() > deadline or fake.poll() is not None:
                raise SystemExit("the fake engine did not start")
            time.sleep(0.1)
        engine_url = f"http://127.0.0.1:{port_file.read_text()}/v1"
        app_port = _free_port()
        env = {**os.environ, "OCR_UI__ENGINE__BASE_URL": engine_url, "OCR_UI__APP__PORT": str(app_port),
               "OCR_UI__APP__LOG_DIR": str(tmp / "logs"), "OCR_UI__APP__LOG_LEVEL": "warning",
               "OCR_UI__GENERATION__IGNORE_EOS": "true", "OCR_UI__GENERATION__MAX_TOKENS_CAP": str(args.chunks),
               "OCR_UI__CLIENT__MAX_IN_FLIGHT": str(max(16, args.concurrency)), "OCR_UI__METRICS__NVML": "false"}
        engine = _bench("engine", engine_url, args, env)

        profile = ["-m", "cProfile", "-o", args.profile] if args.profile else []
        log = (tmp / "app.log").open("wb")  # its shutdown traceback (SIGINT) would only clutter the output
        app = subprocess.Popen([sys.executable, *profile, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=log)
        app_url = f"http://127.0.0.1:{app_port}"
        _wait_http(f"{app_url}/healthz", app)
        proc = psutil.Process(app.pid)
        # The warm-up requests run inside _bench too; they are few, so they are counted (a slight overcount).
        before = proc.cpu_times()
        t0 = time.monotonic()
        through_app = _bench("app", app_url, args, env)
        wall = time.monotonic() - t0
        after = proc.cpu_times()
        cpu_s = (after.user - before.user) + (after.system - before.system)
        per_request = math.ceil(args.chunks / args.stream_interval)  # chunks per answer
        chunks = (args.requests + _warmup(args)) * per_request  # measured + warm-up requests
        result = {
            "concurrency": args.concurrency, "requests": args.requests, "tokens_per_request": args.chunks,
            "chunks_per_request": per_request,
            "stream_interval": args.stream_interval, "token_delay_s": args.token_delay,
            "engine_req_s": engine["req_per_s"], "app_req_s": through_app["req_per_s"],
            "app_ttft_p50_ms": through_app["ttft_p50_ms"], "engine_ttft_p50_ms": engine["ttft_p50_ms"],
            "app_render_p50_ms": through_app.get("render_p50_ms"), "app_own_ttft_p50_ms": through_app.get("app_ttft_p50_ms"),
            "app_errors": through_app["errors"], "app_cpu_s": round(cpu_s, 2), "app_cpu_wall_s": round(wall, 2),
            "app_cpu_us_per_chunk": round(cpu_s / chunks * 1e6, 1),
        }
        print(json.dumps(result), flush=True)
    finally:
        if app is not None:
            _stop(app, signal.SIGINT)  # SIGINT: uvicorn shuts down cleanly, so cProfile writes its stats
        _stop(fake)
    return 0


if __name__ == "__main__":
    sys.exit(main())
