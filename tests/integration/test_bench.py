"""The load-test CLI against the fake engine (and the real app in front of it) on real sockets.

No timing is asserted: the checks are on the shape of the records, the summary and the files.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from PIL import Image

from ocr_ui import bench, bench_procs
from tests.support.fake_engine import FakeEngine, Reply, settings_for

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def lines_of(out: str) -> tuple[list[dict], list[dict]]:
    items = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return [i for i in items if "summary" not in i], [i["summary"] for i in items if "summary" in i]


def test_a_sweep_against_the_engine_records_every_request_and_writes_the_files(tmp_path: Path) -> None:
    with FakeEngine() as fe:
        fe.default = Reply(text="line of text " * 10, token_delay=0.001)
        done = subprocess.run(
            [sys.executable, "-m", "ocr_ui.bench", "--url", fe.base_url, "--concurrency", "1,3", "--requests", "5",
             "--pages", "small,a4", "--max-tokens", "64", "--ignore-eos", "--out", str(tmp_path)],
            cwd=ROOT, capture_output=True, text=True, timeout=120)
        sent = list(fe.requests)
    assert done.returncode == 0, done.stderr
    records, summaries = lines_of(done.stdout)
    assert [r["concurrency"] for r in records].count(1) == 5 and [r["concurrency"] for r in records].count(3) == 5
    assert all(r["error"] is None and r["output_tokens"] > 0 and r["ttft_s"] <= r["latency_s"] for r in records)
    assert {r["page"] for r in records} == {"small", "a4"}
    assert [s["concurrency"] for s in summaries] == [1, 3]
    assert all(s["ok"] == 5 and s["error_rate"] == 0 and s["ttft_p50_ms"] is not None for s in summaries)
    assert "concurrency    3: 5/5 ok" in done.stderr
    # The engine saw the app's message shape, the sampling flags and the bench's own limits.
    body = sent[-1]
    assert body["stream"] is True and body["max_tokens"] == 64 and body["ignore_eos"] is True
    image_url = body["messages"][-1]["content"][0]["image_url"]["url"]
    assert image_url.startswith("data:image/jpeg;base64,")
    assert len(sent) == 1 + 5 + 5  # one warm-up request, then exactly the requested ones
    # Files: one JSON line per request, the summary with both levels, a real PNG.
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 10
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [level["concurrency"] for level in summary["levels"]] == [1, 3] and summary["ignore_eos"] is True
    png = (tmp_path / "curves.png").read_bytes()
    assert png.startswith(PNG_MAGIC)
    with Image.open(io.BytesIO(png)) as image:
        image.verify()


def test_engine_errors_are_counted_by_kind_and_the_run_still_finishes(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeEngine() as fe:
        count = {"n": 0}

        def every_other(body: dict) -> Reply:
            count["n"] += 1
            return Reply(status=500, message="boom") if count["n"] % 2 == 0 else Reply(text="ok text")

        fe.responder = every_other
        code = bench.main(["--url", fe.base_url, "--concurrency", "2", "--requests", "6", "--warmup", "0"])
    assert code == 0
    records, (summary,) = lines_of(capsys.readouterr().out)
    assert summary["errors"] == 3 and summary["error_rate"] == 0.5
    assert summary["error_kinds"] == {"engine_error": 3}
    failed = [r for r in records if r["error"]]
    assert all(r["latency_s"] is None and "HTTP 500" in r["detail"] for r in failed)


def test_an_unreachable_engine_gives_errors_not_a_crash(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeEngine() as fe:
        url = fe.base_url
        fe.down()
        code = bench.main(["--url", url, "--concurrency", "1", "--requests", "2", "--warmup", "0", "--quiet"])
    assert code == 0
    records, (summary,) = lines_of(capsys.readouterr().out)
    assert records == [] and summary["error_kinds"] == {"engine_unavailable": 2}


@pytest.mark.parametrize(("target", "model", "code", "hint", "chats"), [
    ("app", None, "http_404", "is the app's own address, e.g. http://127.0.0.1:7860 (no /v1)", 0),
    ("engine", "no-such-model", "engine_rejected", "serve the model 'no-such-model'", 1),
])
def test_a_warm_up_that_fails_for_a_setup_mistake_stops_the_run(target: str, model: str | None, code: str, hint: str,
                                                               chats: int, capsys: pytest.CaptureFixture[str]) -> None:
    # --target app pointed at the engine's /v1 address (the fake engine has no /api/ocr), and an engine
    # asked for a model it does not serve: no level runs, one error line says what to fix.
    with FakeEngine() as fe:
        argv = ["--target", target, "--url", fe.base_url, "--concurrency", "2", "--requests", "50"]
        assert bench.main(argv + (["--model", model] if model else [])) == 2
        sent = len(fe.requests)
    out, err = capsys.readouterr()
    assert sent == chats and "summary" not in out  # the warm-up's one chat request at most
    assert err.startswith(f"error: the warm-up request failed ({code}") and hint in err and err.count("\n") == 1
    assert f"--url for --target {target} is the" in err


def test_a_busy_warm_up_does_not_stop_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    # Busy is load, not a setup mistake: the sweep still runs and counts what it gets.
    with FakeEngine() as fe:
        fe.script = [Reply(status=503, message="busy")]
        fe.default = Reply(text="ok text")
        code = bench.main(["--url", fe.base_url, "--concurrency", "1", "--requests", "2"])
    assert code == 0
    _, (summary,) = lines_of(capsys.readouterr().out)
    assert summary["ok"] == 2


def test_a_duration_bounded_level_stops_by_itself(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeEngine() as fe:
        fe.default = Reply(text="abc " * 5, token_delay=0.01)
        code = bench.main(["--url", fe.base_url, "--concurrency", "2", "--duration", "0.5", "--warmup", "0"])
    assert code == 0
    records, (summary,) = lines_of(capsys.readouterr().out)
    assert summary["requests"] == len(records) >= 2 and summary["ok"] == len(records)


def test_a_level_split_over_two_processes_merges_into_one_level(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    with FakeEngine() as fe:
        fe.default = Reply(text="line of text " * 10, token_delay=0.001)
        code = bench.main(["--url", fe.base_url, "--concurrency", "1,3", "--requests", "7", "--pages", "small,a4",
                           "--max-tokens", "64", "--procs", "2", "--out", str(tmp_path)])
        sent = len(fe.requests)
    assert code == 0
    records, summaries = lines_of(capsys.readouterr().out)
    split = [r for r in records if r["concurrency"] == 3]
    assert [r["index"] for r in split] == list(range(7))  # one numbering across both workers
    assert Counter(r["worker"] for r in split) == {0: 4, 1: 3}  # 3 in flight and 7 requests: 2+1 and 4+3
    assert {r["worker"] for r in records if r["concurrency"] == 1} == {0}  # a level of 1 stays in-process
    assert Counter(r["page"] for r in split) == {"small": 4, "a4": 3}  # the same mix one process sends
    assert all(r["error"] is None and r["output_tokens"] > 0 for r in split)
    assert [(s["concurrency"], s["requests"], s["ok"]) for s in summaries] == [(1, 7, 7), (3, 7, 7)]
    assert sent == 1 + 7 + 7  # the parent's warm-up, then exactly the requested ones
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 14
    assert json.loads((tmp_path / "summary.json").read_text())["procs"] == 2


def _dies(w: int, *share: object) -> None:
    if w == 0:
        os._exit(3)  # a hard crash: no report, no traceback
    bench_procs._worker(w, *share)  # the other worker waits at the start barrier until it is stopped


def _fails(w: int, args: object, settings: object, *share: object) -> None:
    # Worker 0 cannot render its pages (an exception inside the worker); the other waits at the barrier.
    bench_procs._worker(w, args, None if w == 0 else settings, *share)


@pytest.mark.parametrize(("entry", "message"), [
    (_dies, "error: load worker 1 of 2 died (exit code 3)"),
    (_fails, "error: load worker 1 of 2 failed: AttributeError: 'NoneType' object has no attribute"),
])
def test_a_failed_worker_fails_the_run_with_one_error_line(entry: object, message: str,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(bench, "run_split_level", functools.partial(bench_procs.run_split_level, entry=entry))
    with FakeEngine() as fe:
        code = bench.main(["--url", fe.base_url, "--concurrency", "2", "--requests", "2", "--warmup", "0",
                           "--procs", "2"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(message) and "\n" not in err


def test_bad_arguments_exit_2_with_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--pages", "poster", "--url", "http://127.0.0.1:9/v1"]) == 2
    assert capsys.readouterr().err.strip() == "error: unknown page size poster; choose from small, a4, big"
    assert bench.main(["--procs", "65"]) == 2
    assert capsys.readouterr().err.strip() == "error: --procs must be between 1 and 64"
    assert bench.main(["--requests", "0"]) == 2
    with pytest.raises(SystemExit):
        bench.main(["--concurrency", "0"])


def test_files_are_sent_as_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scan = tmp_path / "receipt.png"
    Image.new("RGB", (700, 900), "white").save(scan)
    with FakeEngine() as fe:
        code = bench.main(["--url", fe.base_url, "--concurrency", "1", "--requests", "1", "--warmup", "0",
                           "--files", str(scan)])
        url = fe.requests[0]["messages"][-1]["content"][0]["image_url"]["url"]
    assert code == 0
    (record,), _ = lines_of(capsys.readouterr().out)
    assert record["page"] == "receipt.png"
    with Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))) as sent:
        assert sent.size == (672, 896)  # floored to multiples of 32, as the app sends it


def test_the_app_target_streams_through_the_real_app(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.support.live_app import LiveApp

    with FakeEngine() as fe:
        fe.default = Reply(text="app page text " * 4, token_delay=0.001)
        with LiveApp(settings_for(fe, client={"max_retries": 0})) as live:
            code = bench.main(["--target", "app", "--url", live.url, "--concurrency", "1,2", "--requests", "2",
                               "--warmup", "0", "--max-tokens", "32"])
        assert fe.requests and fe.requests[-1]["max_tokens"] == 32
    assert code == 0
    records, summaries = lines_of(capsys.readouterr().out)
    assert len(records) == 4 and all(r["target"] == "app" and r["error"] is None for r in records)
    assert all(r["ttft_s"] is not None and r["output_tokens"] > 0 for r in records)
    # The app's answer carries its own timings: queue wait and render time per request, image tokens.
    assert all(r["queue_wait_s"] is not None and r["render_s"] is not None and r["image_tokens"] > 0 for r in records)
    # The app's own TTFT (page start to first text) fits inside the one the client saw.
    assert all(0 < r["app_ttft_s"] <= r["ttft_s"] for r in records)
    assert [s["ok"] for s in summaries] == [2, 2]
    assert all(s["queue_wait_p50_ms"] is not None and s["render_p50_ms"] is not None for s in summaries)
    assert all(0 < s["app_ttft_p50_ms"] <= s["ttft_p50_ms"] for s in summaries)


def test_preprocessing_cost_is_measured_for_a_photo_and_a_pdf_page(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--preprocess", "--repeat", "1"]) == 0
    results = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["input"] for r in results] == ["photo_jpeg_4000x3000", "pdf_a4_200dpi"]
    assert results[0]["source"] == "4000x3000" and results[1]["pdf_dpi"] == 200
    for r in results:
        width, height = (int(v) for v in r["sent"].split("x"))
        assert width % 32 == 0 and height % 32 == 0 and r["ms_p50"] > 0


def test_the_baseline_without_a_checkpoint_folder_is_a_clear_error(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--baseline", "transformers", "--model-dir", str(tmp_path)]) == 2
    assert "a checkpoint folder with a config.json" in capsys.readouterr().err
