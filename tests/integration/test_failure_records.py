"""Failure records written by the service: one line per failed page or refused request, never the content."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path

import httpx
import pytest

from ocr_ui.client import EngineClient
from ocr_ui.config import Settings
from ocr_ui.errors import EncryptedPdf
from ocr_ui.records import FailureRecorder
from ocr_ui.service import OcrRequest, OcrService
from tests.support import corpus
from tests.support.fake_engine import FakeEngine, Reply, settings_for
from tests.support.live_app import LiveApp

SECRET_TEXT = "Salary statement Li Lei"


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


@pytest.fixture
async def recorded(engine_settings: Settings, tmp_path: Path) -> AsyncIterator[tuple[OcrService, Path]]:
    log = tmp_path / "failures.jsonl"
    client = EngineClient(engine_settings)
    yield OcrService(engine_settings, client, recorder=FailureRecorder(log)), log
    await client.close()


@pytest.mark.anyio
async def test_a_failed_page_gets_one_record_with_its_page_code_timings_and_hash(
        fake_engine: FakeEngine, recorded: tuple[OcrService, Path]) -> None:
    service, log = recorded
    data = corpus.pdf_bytes(3, text=SECRET_TEXT)
    fake_engine.push(Reply(), Reply(fault="close", fault_after=3), Reply())
    final = await service.run_to_end(OcrRequest(data=data, preset="markdown", request_id="req0000001"))
    assert [p.status for p in final.pages] == ["done", "failed", "done"]
    [rec] = records(log)
    assert rec["request_id"] == "req0000001" and rec["preset"] == "markdown" and rec["page"] == 2
    assert rec["input_type"] == "pdf" and rec["input_bytes"] == len(data)
    assert rec["sha256"] == hashlib.sha256(data).hexdigest()
    assert rec["code"] == "stream_broken" and rec["message"] == final.pages[1].error
    assert rec["ttft_s"] is not None and rec["elapsed_s"] >= rec["ttft_s"]
    assert SECRET_TEXT not in log.read_text(encoding="utf-8")


@pytest.mark.anyio
async def test_an_engine_that_goes_down_records_every_remaining_page(
        fake_engine: FakeEngine, recorded: tuple[OcrService, Path]) -> None:
    service, log = recorded
    fake_engine.down()
    final = await service.run_to_end(OcrRequest(data=corpus.pdf_bytes(3), preset="text"))
    assert {p.error_code for p in final.pages} == {"engine_unavailable"}
    assert [(r["page"], r["code"]) for r in records(log)] == [(1, "engine_unavailable"), (2, "engine_unavailable"),
                                                              (3, "engine_unavailable")]


@pytest.mark.anyio
async def test_bad_input_is_recorded_once_per_request_with_its_sniffed_type(
        fake_engine: FakeEngine, recorded: tuple[OcrService, Path]) -> None:
    service, log = recorded
    data = corpus.encrypted_pdf()
    with pytest.raises(EncryptedPdf):
        await service.run_to_end(OcrRequest(data=data, preset="text", request_id="req0000002"))
    [rec] = records(log)
    assert rec["request_id"] == "req0000002" and rec["page"] is None
    assert rec["code"] == "encrypted_pdf" and rec["input_type"] == "pdf" and rec["ttft_s"] is None
    assert fake_engine.requests == []


@pytest.mark.anyio
async def test_an_upload_of_an_unknown_type_is_recorded_as_unknown(recorded: tuple[OcrService, Path]) -> None:
    service, log = recorded
    with pytest.raises(Exception, match="Text files"):
        await service.run_to_end(OcrRequest(data=b"just some text", preset="text"))
    assert records(log)[0]["input_type"] == "unknown" and records(log)[0]["code"] == "unsupported_type"


@pytest.mark.anyio
async def test_successful_and_stopped_pages_leave_no_record(fake_engine: FakeEngine,
                                                            recorded: tuple[OcrService, Path]) -> None:
    service, log = recorded
    await service.run_to_end(OcrRequest(data=corpus.png_bytes(), preset="text"))
    fake_engine.push(Reply(text="x" * 300, token_delay=0.05))
    async with aclosing(service.run(OcrRequest(data=corpus.png_bytes(), preset="text"))) as updates:
        async for update in updates:
            if update.pages[0].text:
                break  # the user pressed Stop
    assert await asyncio.to_thread(fake_engine.wait_until, lambda: fake_engine.disconnects == 1)
    assert records(log) == []


def test_the_app_writes_failures_to_the_log_folder_and_keeps_inputs_only_when_asked(tmp_path: Path) -> None:
    with FakeEngine() as engine:
        for keep in (False, True):
            log_dir = tmp_path / f"keep-{keep}"
            settings = settings_for(engine, app={"log_dir": str(log_dir), "keep_failed_inputs": keep},
                                    client={"max_retries": 0}, admission={"enabled": False})
            engine.push(Reply(status=500, message="boom"))
            data = corpus.png_bytes(text="private")
            with LiveApp(settings) as live:
                response = httpx.post(live.url + "/api/ocr", json={"file": base64.b64encode(data).decode()}, timeout=30)
            assert response.status_code == 502 and response.json()["error"]["code"] == "engine_error"
            [rec] = records(log_dir / "failures.jsonl")
            assert rec["code"] == "engine_error" and rec["page"] == 1 and rec["input_type"] == "png"
            kept = log_dir / "failed-inputs"
            if keep:
                assert rec["input_file"].endswith(".png") and "/" not in rec["input_file"]
                assert (kept / rec["input_file"]).read_bytes() == data
                assert (kept.stat().st_mode & 0o777) == 0o700
            else:
                assert "input_file" not in rec and not kept.exists()
