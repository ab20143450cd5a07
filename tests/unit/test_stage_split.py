"""scripts/gpu/stage_split.py: how a GPU run's before/after snapshots are read."""
from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu" / "stage_split.py"


@pytest.fixture(scope="module")
def stage_split():
    spec = importlib.util.spec_from_file_location("stage_split", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _metrics(ttft: tuple[float, float], other_server: tuple[float, float]) -> str:
    # Two API servers' label sets for one histogram, plus a bucket line and a metric that is no stage.
    return "\n".join([
        "# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.",
        f'vllm:time_to_first_token_seconds_sum{{engine="0",model_name="m"}} {ttft[0]}',
        f'vllm:time_to_first_token_seconds_count{{engine="0",model_name="m"}} {ttft[1]}',
        f'vllm:time_to_first_token_seconds_sum{{engine="1",model_name="m"}} {other_server[0]}',
        f'vllm:time_to_first_token_seconds_count{{engine="1",model_name="m"}} {other_server[1]}',
        'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="m"} 3.0',
        'vllm:num_requests_running{engine="0",model_name="m"} 12.0',
    ]) + "\n"


def test_cpu_share_per_named_process_and_stage_means_over_all_servers(tmp_path, stage_split, capsys):
    run = tmp_path / "eA4-c64-r1"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"levels": [{"wall_s": 60.0}]}))
    (run / "cpu-before.txt").write_text("100 1 10 python3 -m vllm serve\n101 100 5 python3 -c spawn\n102 100 7 idle\n")
    (run / "cpu-after.txt").write_text("100 1 70 python3 -m vllm serve\n101 100 35 python3 -c spawn\n102 100 7 idle\n"
                                       "103 1 2 bench\n")
    (run / "metrics-before.txt").write_text(_metrics((1.0, 2.0), (0.0, 0.0)))
    (run / "metrics-after.txt").write_text(_metrics((5.0, 6.0), (4.0, 6.0)))
    # Engine core 100: its main thread busy, one worker thread busy, one idle; 1-01:00:00 is 25 hours.
    # The before file gzipped, as docs/bench keeps them.
    (run / "threads-before.txt.gz").write_bytes(gzip.compress(b"100 100 00:00:30 VLLM::EngineCor\n"
                                                              b"100 150 1-01:00:00 VLLM::EngineCor\n"
                                                              b"100 151 00:00:01 VLLM::EngineCor\n"))
    (run / "threads-after.txt").write_text("100 100 00:01:28 VLLM::EngineCor\n100 150 1-01:00:02 VLLM::EngineCor\n"
                                           "100 151 00:00:01 VLLM::EngineCor\n")
    log = tmp_path / "eA4.log"
    log.write_text("(EngineCore pid=100) INFO ready\n(ApiServer_1 pid=101) INFO started\n")

    stage_split.main(run, [log])
    out = capsys.readouterr().out.splitlines()

    assert out[0] == "eA4-c64-r1: wall 60.0 s"
    assert "EngineCore" in out[1] and "60.0 CPU s" in out[1] and "100 % of a core" in out[1]
    assert "ApiServer_1" in out[2] and "30.0 CPU s" in out[2] and "50 % of a core" in out[2]
    assert "bench" in out[3] and "2.0 CPU s" in out[3]
    assert not any("idle" in line for line in out)  # used no CPU during the run
    assert "  threads of 100: main 58 CPU s, 2 s in 1 of 2 others" in out
    # (5 - 1 + 4) s over (6 - 2 + 6) requests, both servers' label sets added: 800 ms.
    ttft = [line for line in out if "time_to_first_token" in line]
    assert len(ttft) == 1 and "mean    800.0 ms over 10" in ttft[0]
    assert not any("num_requests_running" in line for line in out)
