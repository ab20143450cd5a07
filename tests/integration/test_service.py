"""The OCR service end to end against the fake engine: real images and PDFs, real client, real socket."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from PIL import Image, ImageDraw

from ocr_ui.client import EngineClient
from ocr_ui.config import Settings
from ocr_ui.errors import EmptyFile, InvalidOptions, UnsupportedFileType
from ocr_ui.prompts import TaskOptions
from ocr_ui.service import JobUpdate, OcrRequest, OcrService
from tests.support import corpus
from tests.support.fake_engine import FakeEngine, Reply, default_text, settings_for

pytestmark = pytest.mark.anyio

PROMPT_TEXT_15 = "提取图中的文字。"  # the 1.5 profile's "text" preset


def page_image(width: int, height: int, label: str) -> Image.Image:
    image = Image.new("RGB", (width, height), "white")
    ImageDraw.Draw(image).text((20, 20), label, fill="black")
    return image


def png_bytes(width: int = 640, height: int = 480) -> bytes:
    buffer = io.BytesIO()
    page_image(width, height, "Hello page").save(buffer, "PNG")
    return buffer.getvalue()


def pdf_bytes(sizes: list[tuple[int, int]]) -> bytes:
    pages = [page_image(w, h, f"page {i}") for i, (w, h) in enumerate(sizes, start=1)]
    buffer = io.BytesIO()
    pages[0].save(buffer, "PDF", save_all=True, append_images=pages[1:], resolution=72)
    return buffer.getvalue()


@pytest.fixture
async def service(engine_settings: Settings) -> AsyncIterator[OcrService]:
    client = EngineClient(engine_settings)
    yield OcrService(engine_settings, client)
    await client.close()


async def collect(service: OcrService, req: OcrRequest) -> list[JobUpdate]:
    updates = []
    async with asyncio.timeout(30):
        async for update in service.run(req):
            updates.append(update)
    return updates


async def test_an_image_becomes_one_page_with_the_engine_text(service: OcrService) -> None:
    final = await service.run_to_end(OcrRequest(data=png_bytes(), preset="text"))
    assert final.done and final.total == 1
    page = final.pages[0]
    assert (page.number, page.status, page.finish_reason) == (1, "done", "stop")
    assert page.text == default_text(PROMPT_TEXT_15)
    assert page.error is None and page.output_tokens and page.ttft_s is not None and page.elapsed_s is not None
    assert (page.source_width, page.source_height) == (640, 480)
    assert page.width % 32 == 0 and page.height % 32 == 0 and page.image_tokens > 0


async def test_a_three_page_pdf_yields_three_results_in_order(fake_engine: FakeEngine, service: OcrService) -> None:
    fake_engine.push(Reply(text="page one"), Reply(text="page two"), Reply(text="page three"))
    final = await service.run_to_end(OcrRequest(data=pdf_bytes([(600, 800), (800, 600), (500, 500)]), preset="text"))
    assert [p.number for p in final.pages] == [1, 2, 3]
    assert [p.text for p in final.pages] == ["page one", "page two", "page three"]
    assert [p.status for p in final.pages] == ["done"] * 3
    portrait, landscape, square = final.pages
    assert portrait.source_height > portrait.source_width
    assert landscape.source_width > landscape.source_height
    assert square.source_width == square.source_height
    assert len(fake_engine.requests) == 3


async def test_a_page_range_selects_only_those_pages(fake_engine: FakeEngine, service: OcrService) -> None:
    final = await service.run_to_end(OcrRequest(data=pdf_bytes([(300, 300)] * 4), preset="text", pages="2-3"))
    assert [p.number for p in final.pages] == [2, 3]
    assert len(fake_engine.requests) == 2


async def test_requests_carry_max_tokens_official_sampling_and_a_data_url_never_a_path(
        fake_engine: FakeEngine, service: OcrService) -> None:
    await service.run_to_end(OcrRequest(data=png_bytes(), preset="formula"))
    body = fake_engine.requests[-1]
    assert body["max_tokens"] == 1024  # the formula preset's budget, under generation.max_tokens_cap
    assert body["temperature"] == 0.0 and body["top_p"] == 1.0
    assert body["top_k"] == -1 and body["repetition_penalty"] == 1.08
    content = body["messages"][-1]["content"]
    assert content[0]["image_url"]["url"].startswith("data:image/jpeg;base64,")
    assert content[1]["text"] == "识别图片中的公式，用LaTeX格式表示。"
    raw = json.dumps(body)
    assert "file://" not in raw and "/tmp" not in raw and "/work" not in raw


async def test_the_requested_max_tokens_is_capped_by_the_setting(fake_engine: FakeEngine) -> None:
    settings = settings_for(fake_engine, generation={"max_tokens_cap": 500}, client={"max_retries": 0})
    client = EngineClient(settings)
    try:
        await OcrService(settings, client).run_to_end(OcrRequest(data=png_bytes(), preset="text", max_tokens=9000))
    finally:
        await client.close()
    assert fake_engine.requests[-1]["max_tokens"] == 500


async def test_an_update_follows_every_chunk_so_the_text_grows_token_by_token(
        fake_engine: FakeEngine, service: OcrService) -> None:
    pieces = ["第", "一", "行", " ", "text", "。"]
    fake_engine.push(Reply(chunks=pieces))
    seen = []
    async for update in service.run(OcrRequest(data=png_bytes(), preset="text")):
        seen.append((update.pages[0].status, update.pages[0].text))
    texts = [text for status, text in seen if status == "running"]
    growing = [t for i, t in enumerate(texts) if i == 0 or t != texts[i - 1]]
    assert growing == ["", "第", "第一", "第一行", "第一行 ", "第一行 text", "第一行 text。"]
    assert seen[0] == ("queued", "") and seen[-1] == ("done", "第一行 text。")


async def test_bad_input_raises_before_the_first_update_and_reaches_no_engine(
        fake_engine: FakeEngine, service: OcrService) -> None:
    with pytest.raises(EmptyFile):
        await anext(service.run(OcrRequest(data=b"", preset="text")))
    with pytest.raises(InvalidOptions):
        await anext(service.run(OcrRequest(data=png_bytes(), preset="fields", options=TaskOptions(fields=()))))
    assert fake_engine.requests == []


async def test_stop_closes_the_upstream_request_and_marks_the_page_stopped(
        fake_engine: FakeEngine, service: OcrService) -> None:
    fake_engine.push(Reply(chunks=["字"] * 500, token_delay=0.01))
    updates = service.run(OcrRequest(data=pdf_bytes([(300, 300)] * 2), preset="text"))
    async for update in updates:
        if update.pages[0].text:
            break
    await updates.aclose()  # what Gradio does on Stop or when the browser leaves
    assert await asyncio.to_thread(fake_engine.wait_until, lambda: fake_engine.disconnects == 1)
    assert [p.status for p in update.pages] == ["stopped", "stopped"]
    assert len(fake_engine.requests) == 1  # page 2 was never sent
    assert fake_engine.completed == 0


async def test_cancelling_the_task_running_a_job_propagates_and_closes_the_stream(
        fake_engine: FakeEngine, service: OcrService) -> None:
    fake_engine.push(Reply(chunks=["a"] * 500, token_delay=0.01))
    first_text = asyncio.Event()

    async def job() -> None:
        async for update in service.run(OcrRequest(data=png_bytes(), preset="text")):
            if update.pages[0].text:
                first_text.set()

    task = asyncio.create_task(job())
    await first_text.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(fake_engine.wait_until, lambda: fake_engine.disconnects == 1)


async def test_a_failed_page_keeps_the_others(fake_engine: FakeEngine, service: OcrService) -> None:
    fake_engine.push(Reply(text="one"), Reply(status=500), Reply(text="three"))
    final = await service.run_to_end(OcrRequest(data=pdf_bytes([(300, 300)] * 3), preset="text"))
    assert [p.status for p in final.pages] == ["done", "failed", "done"]
    assert [p.text for p in final.pages] == ["one", "", "three"]
    assert final.pages[1].error_code == "engine_error" and "HTTP 500" in (final.pages[1].error or "")


async def test_partial_text_stays_in_the_page_when_the_stream_breaks(
        fake_engine: FakeEngine, service: OcrService) -> None:
    fake_engine.push(Reply(chunks=["部分", "文字", "lost"], fault="error_event", fault_after=2))
    final = await service.run_to_end(OcrRequest(data=png_bytes(), preset="text"))
    page = final.pages[0]
    assert (page.status, page.error_code, page.text) == ("failed", "stream_broken", "部分文字")


async def test_an_engine_that_is_down_fails_every_remaining_page_with_the_same_message(
        fake_engine: FakeEngine, service: OcrService) -> None:
    fake_engine.down()
    final = await service.run_to_end(OcrRequest(data=pdf_bytes([(300, 300)] * 3), preset="text"))
    assert final.done
    assert [p.status for p in final.pages] == ["failed"] * 3
    assert {p.error_code for p in final.pages} == {"engine_unavailable"}
    assert len({p.error for p in final.pages}) == 1 and "not reachable" in (final.pages[0].error or "")


async def _parallel_jobs(fake_engine: FakeEngine, max_in_flight: int, jobs: int) -> list[JobUpdate]:
    """``jobs`` one-page jobs at once through a service whose client keeps ``max_in_flight`` open."""
    settings = settings_for(fake_engine, client={"max_in_flight": max_in_flight, "max_retries": 0})
    client = EngineClient(settings)
    service = OcrService(settings, client)
    try:
        return await asyncio.gather(*(
            service.run_to_end(OcrRequest(data=png_bytes(300 + i, 300), preset="text")) for i in range(jobs)))
    finally:
        await client.close()


async def test_six_parallel_jobs_never_exceed_max_in_flight_at_the_engine(fake_engine: FakeEngine) -> None:
    fake_engine.default = Reply(token_delay=0.005)
    finals = await _parallel_jobs(fake_engine, max_in_flight=2, jobs=6)
    assert all(f.pages[0].status == "done" for f in finals)
    assert await asyncio.to_thread(fake_engine.wait_until, lambda: fake_engine.completed == 6)  # counted after writing
    assert fake_engine.peak_in_flight == 2


async def test_each_page_reports_where_its_time_went_including_the_wait_for_a_slot(fake_engine: FakeEngine) -> None:
    fake_engine.default = Reply(first_token_delay=0.3)
    finals = await _parallel_jobs(fake_engine, max_in_flight=1, jobs=2)
    pages = sorted((f.pages[0] for f in finals), key=lambda p: p.queue_wait_s or 0.0)
    assert all(p.status == "done" and p.render_s is not None and p.render_s >= 0 for p in pages)
    # One slot: the second page waited for the whole first answer (at least its 0.3 s first-token delay).
    assert (pages[0].queue_wait_s or 0.0) < 0.2 and (pages[1].queue_wait_s or 0.0) >= 0.25
    assert all((p.ttft_s or 0.0) >= (p.queue_wait_s or 0.0) for p in pages)  # ttft counts from the page's start


async def test_a_jpeg_sent_as_is_is_prepared_on_the_event_loop_and_other_pages_in_a_thread(
        fake_engine: FakeEngine, service: OcrService, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from ocr_ui import preprocess

    made: list[tuple[str, str]] = []  # (how, thread) for every page that was made
    forwarded, rendered = preprocess.forwarded_page, preprocess.render_page

    def recording_forwarded(*args: Any, **kwargs: Any) -> preprocess.Page | None:
        page = forwarded(*args, **kwargs)
        if page is not None:
            made.append(("forwarded", threading.current_thread().name))
        return page

    def recording_rendered(*args: Any, **kwargs: Any) -> preprocess.Page:
        made.append(("rendered", threading.current_thread().name))
        return rendered(*args, **kwargs)

    monkeypatch.setattr(preprocess, "forwarded_page", recording_forwarded)
    monkeypatch.setattr(preprocess, "render_page", recording_rendered)
    loop_thread = threading.current_thread().name
    for data in (corpus.jpeg_bytes(640, 480), png_bytes()):
        final = await service.run_to_end(OcrRequest(data=data, preset="text"))
        assert final.pages[0].status == "done"
    # A ~1 ms job waited tens of ms for the GIL in a thread under load; a PNG is re-encoded off the loop.
    assert [how for how, _ in made] == ["forwarded", "rendered"]
    assert made[0][1] == loop_thread and made[1][1] != loop_thread


async def test_a_small_image_is_opened_on_the_event_loop_and_a_pdf_in_a_thread(
        fake_engine: FakeEngine, service: OcrService, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from ocr_ui import preprocess
    from ocr_ui.service import INLINE_MAX_BYTES

    opened: list[tuple[str, bool]] = []  # (kind, on the loop's thread) for every upload opened
    loop_thread = threading.current_thread().name
    real_open = preprocess.open_document

    def recording_open(data: bytes, *args: Any, **kwargs: Any) -> preprocess.Document:
        doc = real_open(data, *args, **kwargs)
        opened.append((doc.kind, threading.current_thread().name == loop_thread))
        return doc

    monkeypatch.setattr(preprocess, "open_document", recording_open)
    big_png = corpus.image_bytes("bmp", 640, 560)  # uncompressed: over the in-place bound
    assert len(big_png) > INLINE_MAX_BYTES
    for data in (corpus.jpeg_bytes(640, 480), png_bytes(), corpus.pdf_bytes(1), big_png):
        final = await service.run_to_end(OcrRequest(data=data, preset="text"))
        assert final.pages[0].status == "done"
    # A header read waited for the GIL in a thread under load; a PDF's page count and a big file stay off the loop.
    assert opened == [("jpeg", True), ("png", True), ("pdf", False), ("bmp", False)]
    # A file that is not one we read is refused from the thread, with its own message.
    with pytest.raises(UnsupportedFileType, match="Text files are not supported"):
        await service.run_to_end(OcrRequest(data=b"plain text, not a picture", preset="text"))


async def test_an_endless_repetition_is_stopped_early_and_trimmed(fake_engine: FakeEngine, service: OcrService) -> None:
    unit = "重复的一段话。"
    fake_engine.push(Reply(chunks=["开头。"] + [unit] * 3000, token_delay=0.002))
    final = await service.run_to_end(OcrRequest(data=png_bytes(), preset="text"))
    page = final.pages[0]
    assert page.status == "done" and page.finish_reason == "repetition" and page.trimmed
    assert page.text == "开头。" + unit
    assert await asyncio.to_thread(fake_engine.wait_until, lambda: fake_engine.disconnects == 1)


async def test_health_reports_the_engine_and_the_slots(service: OcrService, fake_engine: FakeEngine) -> None:
    report = await service.health()
    assert report["engine"] == {"up": True, "status": "up", "detail": "The OCR engine is up and serves 'tencent/HunyuanOCR'."}
    assert report["slots"] == {"in_use": 0, "waiting": 0, "limit": 24}  # engine.max_num_seqs 16 x 1.5
    fake_engine.down()
    assert (await service.health())["engine"]["status"] == "down"


async def test_ignore_eos_is_sent_only_when_the_benchmark_setting_asks_for_it(fake_engine: FakeEngine) -> None:
    from ocr_ui.client import EngineClient
    from ocr_ui.prompts import TaskOptions
    from ocr_ui.service import OcrRequest, OcrService
    from tests.support import corpus
    from tests.support.fake_engine import settings_for

    for flag in (False, True):
        settings = settings_for(fake_engine, generation={"ignore_eos": flag})
        client = EngineClient(settings)
        try:
            await OcrService(settings, client).run_to_end(
                OcrRequest(data=corpus.png_bytes(96, 64), preset="text", options=TaskOptions()))
        finally:
            await client.close()
        assert fake_engine.requests[-1].get("ignore_eos", False) is flag
