"""Failure records: one JSON line each, a hash instead of the content, private copies only on request."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import stat
import threading
from pathlib import Path

import pytest

from ocr_ui.errors import ConfigError, EngineTimeout
from ocr_ui.records import FailureRecorder, describe_error

SECRET = b"%PDF-1.7 salary statement: Li Lei 12,345.00 CNY"


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_a_failure_becomes_one_json_line_with_hash_and_timings(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "failures.jsonl"
    rec = FailureRecorder(log).record(request_id="ab12cd34ef56", preset="markdown", data=SECRET, input_type="pdf",
                                      page=3, error=EngineTimeout("The engine took too long to answer."),
                                      ttft_s=1.23456, elapsed_s=600.0)
    [line] = _lines(log)
    assert line == rec
    assert line["request_id"] == "ab12cd34ef56" and line["preset"] == "markdown" and line["page"] == 3
    assert line["input_type"] == "pdf" and line["input_bytes"] == len(SECRET)
    assert line["code"] == "engine_timeout" and line["message"] == "The engine took too long to answer."
    assert line["ttft_s"] == 1.2346 and line["elapsed_s"] == 600.0
    assert line["sha256"] == hashlib.sha256(SECRET).hexdigest()
    assert line["ts"].endswith("+00:00")
    assert "input_file" not in line


def test_the_content_never_reaches_the_log(tmp_path: Path) -> None:
    log = tmp_path / "failures.jsonl"
    FailureRecorder(log).record(request_id="r", preset="text", data=SECRET, input_type="pdf", code="corrupt_file",
                                message="The PDF could not be read.")
    raw = log.read_bytes()
    assert b"salary" not in raw and b"Li Lei" not in raw
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert not (tmp_path / "failed-inputs").exists()


def test_foreign_exceptions_are_recorded_by_class_name_only() -> None:
    code, message = describe_error(OSError("/srv/ocr/secret/path.pdf: permission denied"))
    assert code == "internal_error" and message == "unexpected OSError"
    assert "/srv" not in message


def test_long_messages_are_cut(tmp_path: Path) -> None:
    rec = FailureRecorder(io.StringIO()).record(request_id="r", preset="text", data=b"x", input_type="png",
                                                code="stream_broken", message="x" * 5000)
    assert len(rec["message"]) == 500


def test_kept_inputs_are_private_and_named_by_hash(tmp_path: Path) -> None:
    log = tmp_path / "failures.jsonl"
    recorder = FailureRecorder(log, keep_inputs=True)
    first = recorder.record(request_id="../../etc/passwd", preset="text", data=SECRET, input_type="pdf",
                            code="engine_error", message="m", page=1)
    second = recorder.record(request_id="r2", preset="text", data=SECRET, input_type="pdf",
                             code="engine_error", message="m", page=2)
    name = first["input_file"]
    assert name == second["input_file"] == hashlib.sha256(SECRET).hexdigest()[:32] + ".pdf"
    assert "/" not in name
    kept = tmp_path / "failed-inputs" / name
    assert kept.read_bytes() == SECRET
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE(kept.parent.stat().st_mode) == 0o700
    assert [p.name for p in kept.parent.iterdir()] == [name]  # the same document is stored once
    assert str(tmp_path) not in log.read_text()


def test_an_unknown_input_type_is_kept_with_a_neutral_extension(tmp_path: Path) -> None:
    rec = FailureRecorder(tmp_path / "f.jsonl", keep_inputs=True, inputs_dir=tmp_path / "keep").record(
        request_id="r", preset="text", data=b"??", input_type="exe;rm -rf", code="unsupported_type", message="m")
    assert rec["input_file"].endswith(".bin")
    assert (tmp_path / "keep" / rec["input_file"]).exists()


def test_keeping_inputs_needs_a_folder() -> None:
    with pytest.raises(ConfigError):
        FailureRecorder(io.StringIO(), keep_inputs=True)


def test_a_stream_target_gets_one_line_per_record() -> None:
    stream = io.StringIO()
    recorder = FailureRecorder(stream)
    for i in range(3):
        recorder.record(request_id=f"r{i}", preset="text", data=b"x", input_type="png", code="c", message="m")
    assert [json.loads(line)["request_id"] for line in stream.getvalue().splitlines()] == ["r0", "r1", "r2"]


def test_concurrent_threads_and_tasks_never_interleave_lines(tmp_path: Path) -> None:
    log = tmp_path / "failures.jsonl"
    recorder = FailureRecorder(log)
    message = "长消息" * 150  # long lines make interleaving visible if it happens

    def worker(n: int) -> None:
        for i in range(50):
            recorder.record(request_id=f"t{n}-{i}", preset="text", data=bytes([n, i]), input_type="png",
                            code="engine_error", message=message)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()

    async def tasks() -> None:
        async def one(i: int) -> None:
            await asyncio.sleep(0)
            recorder.record(request_id=f"a{i}", preset="text", data=b"a", input_type="png",
                            code="engine_error", message=message)
        await asyncio.gather(*(one(i) for i in range(50)))

    asyncio.run(tasks())
    for t in threads:
        t.join()
    lines = _lines(log)
    assert len(lines) == 8 * 50 + 50
    assert len({line["request_id"] for line in lines}) == len(lines)
    assert all(line["message"] == message for line in lines)


def test_an_unwritable_log_does_not_fail_the_request(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("file")
    rec = FailureRecorder(blocker / "failures.jsonl").record(request_id="r", preset="text", data=b"x",
                                                             input_type="png", code="c", message="m")
    assert rec["code"] == "c"
    closed = io.StringIO()
    closed.close()
    FailureRecorder(closed).record(request_id="r", preset="text", data=b"x", input_type="png", code="c", message="m")
