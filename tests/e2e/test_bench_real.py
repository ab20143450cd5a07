"""The load-test tool against the real CPU vLLM server and the transformers baseline (tiny checkpoint).

No timing is asserted; the checks are that every request is recorded and the summaries add up.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT, Server

pytestmark = pytest.mark.e2e


def parse(out: str) -> tuple[list[dict], list[dict]]:
    items = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return [i for i in items if "summary" not in i], [i["summary"] for i in items if "summary" in i]


def test_the_bench_sweeps_the_real_engine(vllm_server: Server, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ocr_ui.bench", "--url", vllm_server.base_url, "--model",
         vllm_server.settings.model.served_name, "--concurrency", "1,2", "--requests", "2", "--pages", "small",
         "--max-tokens", "8", "--ignore-eos", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    records, summaries = parse(done.stdout)
    assert len(records) == 4 and all(r["error"] is None for r in records), records
    assert all(r["output_tokens"] == 8 for r in records)  # ignore_eos: exactly max_tokens, every time
    assert [s["ok"] for s in summaries] == [2, 2]
    assert (tmp_path / "curves.png").read_bytes().startswith(b"\x89PNG")


def test_the_transformers_baseline_runs_in_the_engine_environment(engine_python: Path, tiny_checkpoint: Path) -> None:
    done = subprocess.run(
        [str(engine_python), "-m", "ocr_ui.bench", "--baseline", "transformers", "--model-dir", str(tiny_checkpoint),
         "--concurrency", "1,2", "--requests", "2", "--pages", "small,a4", "--max-tokens", "4"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    records, summaries = parse(done.stdout)
    assert [r["concurrency"] for r in records] == [1, 1, 2, 2]
    assert all(r["target"] == "transformers" and r["output_tokens"] == 4 for r in records)
    assert {r["image_tokens"] for r in records} == {794, 2108}  # 1024x768 and 1216x1728 pages
    assert [s["ok"] for s in summaries] == [2, 2]
