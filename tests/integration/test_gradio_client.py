"""The UI's /ocr event through gradio_client, on the app served on a real port, against the fake engine."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError
from gradio_client.utils import QueueError

from tests.integration.test_web_api import pdf_bytes, png_bytes, quick
from tests.support.fake_engine import FakeEngine, Reply, split_text
from tests.support.live_app import LiveApp

# Outputs of /ocr, in order.
PROGRESS, NOTICE, RENDERED, RAW, JSON, BOXES, TABLE, DOWNLOADS = range(8)


@pytest.fixture
def live(fake_engine: FakeEngine, tmp_path: Path) -> Iterator[LiveApp]:
    with LiveApp(quick(fake_engine, app={"log_dir": str(tmp_path)})) as app:
        yield app


@pytest.fixture
def client(live: LiveApp) -> Iterator[Client]:
    c = Client(live.url + "/", verbose=False)
    yield c
    c.close()


@pytest.fixture
def image(tmp_path: Path) -> str:
    path = tmp_path / "scan.png"
    path.write_bytes(png_bytes())
    return str(path)


def test_the_ocr_endpoint_is_named_and_documented(client: Client) -> None:
    endpoints = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    assert list(endpoints) == ["/ocr"]  # helper events (labels, previews, history) stay private
    names = [p["parameter_name"] for p in endpoints["/ocr"]["parameters"]]
    assert names[:2] == ["files", "preset"]


def test_predict_returns_the_models_text(client: Client, fake_engine: FakeEngine, image: str) -> None:
    fake_engine.push(Reply(text="Invoice 42\nTotal 12.50"))
    out = client.predict(files=[handle_file(image)], preset="text", api_name="/ocr")
    assert out[RAW] == "Invoice 42\nTotal 12.50"
    assert "Invoice 42" in out[RENDERED]
    assert 'data-status="done"' in out[PROGRESS]
    names = sorted(Path(p).name for p in out[DOWNLOADS]["value"])
    assert names == ["scan.json", "scan.md", "scan.txt", "scan.zip"]


def test_fields_come_back_as_parsed_json(client: Client, fake_engine: FakeEngine, image: str) -> None:
    fake_engine.push(Reply(text='```json\n{"invoice number": "INV-42", "total": "12.50"}\n```'))
    out = client.predict(files=[handle_file(image)], preset="fields", fields="invoice number, total", api_name="/ocr")
    assert out[JSON] == {"invoice number": "INV-42", "total": "12.50"}
    assert "'invoice number', 'total'" in str(fake_engine.requests[-1]["messages"])


def test_an_answer_that_is_not_json_is_shown_raw_with_a_warning(client: Client, fake_engine: FakeEngine,
                                                                image: str) -> None:
    fake_engine.push(Reply(text="total is twelve fifty"))
    out = client.predict(files=[handle_file(image)], preset="fields", fields="total", api_name="/ocr")
    assert out[JSON]["raw"] == "total is twelve fifty"
    assert "not valid JSON" in out[NOTICE]


def test_an_edited_prompt_is_sent_as_it_is(client: Client, fake_engine: FakeEngine, image: str) -> None:
    client.predict(files=[handle_file(image)], preset="text", prompt="Read only the title.", api_name="/ocr")
    assert fake_engine.requests[-1]["messages"][-1]["content"][-1]["text"] == "Read only the title."


def test_a_pdf_gives_one_section_per_page(client: Client, fake_engine: FakeEngine, tmp_path: Path) -> None:
    fake_engine.push(Reply(text="alpha"), Reply(text="beta"))
    pdf = tmp_path / "two.pdf"
    pdf.write_bytes(pdf_bytes(2))
    out = client.predict(files=[handle_file(str(pdf))], preset="text", api_name="/ocr")
    assert "Page 1 of 2" in out[RENDERED] and "Page 2 of 2" in out[RENDERED]
    assert "alpha" in out[RAW] and "beta" in out[RAW]


def test_a_bad_upload_raises_its_own_message(client: Client, tmp_path: Path) -> None:
    bogus = tmp_path / "notes.png"
    bogus.write_bytes(b"these are notes, not a picture")
    with pytest.raises(AppError, match="Text files are not supported") as info:
        client.predict(files=[handle_file(str(bogus))], preset="text", api_name="/ocr")
    assert str(tmp_path) not in str(info.value)


def test_missing_fields_are_reported_before_any_engine_work(client: Client, fake_engine: FakeEngine,
                                                            image: str) -> None:
    with pytest.raises(AppError, match="at least one field"):
        client.predict(files=[handle_file(image)], preset="fields", api_name="/ocr")
    assert fake_engine.requests == []


def test_cancelling_a_job_closes_the_engine_request(client: Client, fake_engine: FakeEngine, image: str) -> None:
    fake_engine.push(Reply(chunks=split_text("word " * 300, 5), token_delay=0.1))
    job = client.submit(files=[handle_file(image)], preset="text", api_name="/ocr")
    assert fake_engine.wait_until(lambda: fake_engine.in_flight == 1, timeout=20)
    job.cancel()
    assert fake_engine.wait_until(lambda: fake_engine.disconnects == 1, timeout=15)
    assert fake_engine.completed == 0


def test_a_full_queue_answers_busy_instead_of_waiting(fake_engine: FakeEngine, image: str, tmp_path: Path) -> None:
    settings = quick(fake_engine, app={"queue_concurrency": 1, "queue_max_size": 1, "log_dir": str(tmp_path)},
                     client={"idle_timeout_s": 30})
    fake_engine.default = Reply(chunks=split_text("slow " * 100, 5), token_delay=0.1)
    with LiveApp(settings) as live:
        clients = [Client(live.url + "/", verbose=False) for _ in range(3)]
        try:
            running = clients[0].submit(files=[handle_file(image)], preset="text", api_name="/ocr")
            assert fake_engine.wait_until(lambda: fake_engine.in_flight == 1, timeout=20)
            waiting = clients[1].submit(files=[handle_file(image)], preset="text", api_name="/ocr")
            deadline = time.monotonic() + 10
            while waiting.status().code.name not in ("IN_QUEUE", "QUEUE_FULL") and time.monotonic() < deadline:
                time.sleep(0.05)
            with pytest.raises(QueueError, match="Queue is full"):
                clients[2].predict(files=[handle_file(image)], preset="text", api_name="/ocr")
            running.cancel()
            waiting.cancel()
        finally:
            for c in clients:
                c.close()
