"""Soak test: the real app in its own process, fed mixed traffic for a fixed time against a faulty engine.

    python -m ocr_ui.soak --duration 600 --out soak-results/run1

It starts the scripted fake engine (the tests' ``tests/support/fake_engine.py``, on loopback) with a
responder that injects a fault into ``--fault-rate`` of the chat requests (error event, malformed
chunk, connection closed mid-stream, HTTP 500, HTTP 503, a hang that the app's idle timeout ends),
starts ``python app.py`` against it on a free loopback port, and sends requests with at most
``--concurrency`` in flight: several presets, PNG, JPEG and two-page PDFs, streamed and not, some
hostile uploads and some streams the client walks away from. Every answer is classified: a failure is
*expected* when its error code is the one its injected fault (or hostile input) must produce. At the end
it prints one JSON report: requests by kind, error codes, unexpected answers, the app's RSS at start,
after warm-up, at the end and at its peak, open file descriptors, and whether ``/healthz`` still answers.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import random
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from ocr_ui.config import process_environ
from ocr_ui.synthetic_pages import a4_pdf, draw_document, encode

ROOT = Path(__file__).resolve().parent.parent
MB = 1024 * 1024
# Injected fault -> the error code the app must answer with for that page.
FAULT_CODES = {"error_event": "stream_broken", "malformed": "stream_broken", "close": "stream_broken",
               "status_500": "engine_error", "status_503": "engine_busy", "hang": "engine_timeout"}
# Codes that follow from injected faults without naming one page's fault: the breaker opening after a
# run of them, or a page refused while the breaker probes.
CONSEQUENCES = {"circuit_open"}
PRESETS = [("text", {}), ("markdown", {}), ("spotting", {}), ("table", {}),
           ("fields", {"fields": ["total", "date", "name"]}), ("translate", {"target_language": "Chinese"}),
           ("question", {"question": "What is the total?"})]
MAX_UNEXPECTED_KEPT = 50


@dataclass
class Tally:
    """What the traffic saw; ``unexpected`` keeps the first few surprises verbatim."""

    kinds: Counter[str] = field(default_factory=Counter)
    http: Counter[str] = field(default_factory=Counter)
    codes: Counter[str] = field(default_factory=Counter)
    pages_ok: int = 0
    unexpected: list[dict[str, Any]] = field(default_factory=list)
    unexpected_count: int = 0

    def surprise(self, **what: Any) -> None:
        self.unexpected_count += 1
        if len(self.unexpected) < MAX_UNEXPECTED_KEPT:
            self.unexpected.append(what)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def hostile_inputs() -> list[tuple[str, bytes, str | None, str]]:
    """(name, bytes, page range, expected code) from the tests' hostile corpus."""
    from tests.support.corpus import hostile_cases  # the same corpus the unit tests use

    return [(c.name, c.data, c.pages, c.expected.code) for c in hostile_cases()]


def documents(seed: int) -> list[tuple[str, bytes, str | None]]:
    """Small real documents: two PNG pages, a JPEG and a two-page PDF."""
    return [("png", encode(draw_document(640, 480, seed), "png"), None),
            ("png_wide", encode(draw_document(900, 400, seed + 1), "png"), None),
            ("jpeg", encode(draw_document(600, 800, seed + 2), "jpeg"), None),
            ("pdf", a4_pdf(dpi=50, pages=2, seed=seed), "1-2")]


class FaultyResponder:
    """Picks each chat request's reply: a fault with probability ``rate``, else a short streamed answer."""

    def __init__(self, rate: float, rng: random.Random) -> None:
        self.rate, self.rng = rate, rng
        self.injected: Counter[str] = Counter()

    def __call__(self, body: dict[str, Any]) -> Any:
        from tests.support.fake_engine import Reply

        delay = self.rng.uniform(0.002, 0.01)
        if self.rng.random() >= self.rate:
            return Reply(token_delay=delay)
        kind = self.rng.choice(sorted(FAULT_CODES))
        self.injected[kind] += 1
        if kind.startswith("status_"):
            return Reply(status=int(kind[-3:]), message="injected by the soak test")
        return Reply(fault=kind, token_delay=delay)  # type: ignore[arg-type]


class AppProcess:
    """``python app.py`` in a subprocess, stopped by its PID (terminate, then kill)."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.env, self.log_path = env, log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.ps: psutil.Process | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen([sys.executable, str(ROOT / "app.py")], cwd=ROOT, env=self.env,
                                         stdout=log, stderr=subprocess.STDOUT)
        self.ps = psutil.Process(self.proc.pid)

    def sample(self) -> tuple[float, int]:
        """(RSS in MB, open file descriptors)."""
        assert self.ps is not None
        return self.ps.memory_info().rss / MB, self.ps.num_fds()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


async def wait_healthy(http: httpx.AsyncClient, url: str, app: AppProcess, within_s: float = 90.0) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not app.alive():
            raise RuntimeError(f"the app exited at startup; see {app.log_path}")
        try:
            if (await http.get(url + "/healthz")).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.3)
    raise RuntimeError(f"the app did not become healthy within {within_s:g} s; see {app.log_path}")


def classify_pages(pages: list[dict[str, Any]], tally: Tally, allowed: set[str], where: dict[str, Any]) -> None:
    for page in pages:
        code = page.get("error_code")
        if page.get("status") == "done":
            tally.pages_ok += 1
        elif code:
            tally.codes[code] += 1
            if code not in allowed:
                tally.surprise(**where, page=page.get("page"), code=code, message=page.get("error"))
        elif page.get("status") != "stopped":
            tally.surprise(**where, page=page.get("page"), status=page.get("status"))


async def one_request(http: httpx.AsyncClient, url: str, rng: random.Random, docs: list[Any],
                      hostile: list[Any], tally: Tally, args: argparse.Namespace) -> None:
    """Send one request of a random kind and classify what came back."""
    allowed = set(FAULT_CODES.values()) | CONSEQUENCES
    roll = rng.random()
    preset, options = rng.choice(PRESETS)
    if roll < args.hostile_rate:
        name, data, pages, expected = rng.choice(hostile)
        kind, allowed, stream = "hostile", {expected}, False
    else:
        name, data, pages = rng.choice(docs)
        kind = "cancelled" if roll < args.hostile_rate + args.cancel_rate else "normal"
        stream = kind == "cancelled" or rng.random() < 0.5
    body = {"file": base64.b64encode(data).decode(), "preset": preset, "options": options, "pages": pages,
            "stream": stream, "max_tokens": 256}
    where = {"kind": kind, "input": name, "preset": preset, "stream": stream}
    tally.kinds[kind] += 1
    try:
        if not stream:
            response = await http.post(url + "/api/ocr", json=body)
            tally.http[str(response.status_code)] += 1
            answer = response.json()
            if "pages" in answer:
                classify_pages(answer["pages"], tally, allowed, where)
            if response.status_code >= 400:
                code = answer.get("error", {}).get("code")
                if "pages" not in answer:
                    tally.codes[code] += 1
                if code not in allowed:
                    tally.surprise(**where, http=response.status_code, code=code)
            return
        async with http.stream("POST", url + "/api/ocr", json=body) as response:
            tally.http[str(response.status_code)] += 1
            if response.status_code != 200:
                code = json.loads(await response.aread()).get("error", {}).get("code")
                tally.codes[code] += 1
                if code not in allowed:
                    tally.surprise(**where, http=response.status_code, code=code)
                return
            async for line in response.aiter_lines():
                event = json.loads(line)
                if kind == "cancelled" and event.get("delta"):
                    return  # the client walks away mid-stream: leaving the block closes the connection
                if event["event"] == "done":
                    classify_pages(event["pages"], tally, allowed, where)
                elif event["event"] == "error":
                    tally.codes[event["error"]["code"]] += 1
                    if event["error"]["code"] not in allowed:
                        tally.surprise(**where, code=event["error"]["code"])
    except (httpx.HTTPError, ValueError, KeyError) as exc:  # the app broke the protocol or the connection
        tally.surprise(**where, exception=type(exc).__name__, detail=str(exc)[:200])


async def traffic(url: str, args: argparse.Namespace, app: AppProcess, tally: Tally,
                  memory: dict[str, Any]) -> None:
    rng = random.Random(args.seed)
    docs, hostile = documents(args.seed), hostile_inputs()
    stop_at = time.monotonic() + args.duration
    warm_at = time.monotonic() + min(60.0, args.duration / 10)
    timeout = httpx.Timeout(args.request_timeout, connect=5.0)
    async with httpx.AsyncClient(timeout=timeout, limits=httpx.Limits(max_connections=args.concurrency * 2)) as http:

        async def worker() -> None:
            while time.monotonic() < stop_at:
                await one_request(http, url, rng, docs, hostile, tally, args)

        async def sampler() -> None:
            while time.monotonic() < stop_at:
                rss, fds = app.sample()
                memory["rss_peak_mb"] = max(memory["rss_peak_mb"], rss)
                if "rss_warm_mb" not in memory and time.monotonic() >= warm_at:
                    memory["rss_warm_mb"], memory["fds_warm"] = rss, fds
                await asyncio.sleep(1.0)

        await asyncio.gather(sampler(), *(worker() for _ in range(args.concurrency)))


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    """Run the whole soak and return the report."""
    from tests.support.fake_engine import FakeEngine

    out = Path(args.out) if args.out else None
    log_dir = (out or ROOT / "logs" / "soak") / "app-logs"
    responder = FaultyResponder(args.fault_rate, random.Random(args.seed + 1))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    tally = Tally()
    with FakeEngine() as engine:
        engine.responder = responder
        env = {**process_environ(), "OCR_UI__ENGINE__BASE_URL": engine.base_url, "OCR_UI__APP__HOST": "127.0.0.1",
               "OCR_UI__APP__PORT": str(port), "OCR_UI__APP__LOG_DIR": str(log_dir), "OCR_UI__APP__LOG_LEVEL": "warning",
               "OCR_UI__APP__RATE_LIMIT_PER_MINUTE": "0", "OCR_UI__APP__API_TOKENS": "[]",
               "OCR_UI__CLIENT__IDLE_TIMEOUT_S": str(args.idle_timeout), "OCR_UI__CLIENT__MAX_RETRIES": "0",
               "OCR_UI__METRICS__NVML": "false"}
        app = AppProcess(env, log_dir / "app.out")
        app.start()
        try:
            async with httpx.AsyncClient(timeout=10) as http:
                await wait_healthy(http, url, app)
            rss0, fds0 = app.sample()
            memory: dict[str, Any] = {"rss_start_mb": rss0, "rss_peak_mb": rss0, "fds_start": fds0}
            t0 = time.monotonic()
            await traffic(url, args, app, tally, memory)
            elapsed = time.monotonic() - t0
            await asyncio.sleep(args.idle_timeout + 1)  # let abandoned streams and hangs end
            rss1, fds1 = app.sample()
            async with httpx.AsyncClient(timeout=10) as http:
                health = await http.get(url + "/healthz")
            healthy = health.status_code == 200 and health.json().get("app") == "ok"
        finally:
            code = app.stop()
        report: dict[str, Any] = {
            "duration_s": round(elapsed, 1), "concurrency": args.concurrency, "fault_rate": args.fault_rate,
            "requests": sum(tally.kinds.values()), "requests_by_kind": dict(tally.kinds),
            "requests_per_s": round(sum(tally.kinds.values()) / elapsed, 2), "pages_ok": tally.pages_ok,
            "http_status": dict(sorted(tally.http.items())), "failures_by_code": dict(tally.codes.most_common()),
            "faults_injected": dict(responder.injected.most_common()),
            "engine": {"chat_requests": len(engine.requests), "completed": engine.completed,
                       "client_disconnects": engine.disconnects, "peak_in_flight": engine.peak_in_flight},
            "unexpected_count": tally.unexpected_count, "unexpected": tally.unexpected,
            "rss_mb": {"start": round(memory["rss_start_mb"], 1), "after_warmup": round(memory.get("rss_warm_mb", rss0), 1),
                       "end": round(rss1, 1), "peak": round(memory["rss_peak_mb"], 1)},
            "open_fds": {"start": fds0, "after_warmup": memory.get("fds_warm", fds0), "end": fds1},
            "healthz_at_end": healthy, "app_exit_code": code,
        }
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
    return report


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ocr_ui.soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=600.0, help="seconds of traffic (default 600)")
    p.add_argument("--concurrency", type=int, default=4, help="requests in flight at once (default 4)")
    p.add_argument("--fault-rate", type=float, default=0.1, help="share of engine requests given a fault (default 0.1)")
    p.add_argument("--hostile-rate", type=float, default=0.1, help="share of hostile uploads (default 0.1)")
    p.add_argument("--cancel-rate", type=float, default=0.1, help="share of streams abandoned midway (default 0.1)")
    p.add_argument("--idle-timeout", type=float, default=2.0, help="the app's client.idle_timeout_s: ends hangs (default 2)")
    p.add_argument("--request-timeout", type=float, default=60.0, help="seconds one request may take (default 60)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the traffic mix (default 0)")
    p.add_argument("--out", default=None, help="folder for report.json and the app's logs")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not (0 < args.duration <= 86400 and 1 <= args.concurrency <= 64):
        print("error: --duration must be in (0, 86400] and --concurrency in [1, 64]", file=sys.stderr)
        return 2
    if not all(0 <= r <= 1 for r in (args.fault_rate, args.hostile_rate, args.cancel_rate)):
        print("error: rates must be between 0 and 1", file=sys.stderr)
        return 2
    report = asyncio.run(soak(args))
    print(json.dumps(report, indent=2, ensure_ascii=False))
    ok = report["unexpected_count"] == 0 and report["healthz_at_end"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
