"""Hostile input through the running app: POST /api/ocr answers each with its own code and a safe message.

Every case goes through the real app on a socket (uvicorn, FastAPI, the service, the preprocessor) with
the fake engine behind it. Each must be refused with its own error code and HTTP status, in bounded
time (a per-test timeout, no timing assertion), without a single request reaching the engine, and
without a server path or stack trace anywhere in the answer.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support import corpus
from tests.support.fake_engine import FakeEngine, settings_for
from tests.support.live_app import LiveApp

LEAKS = re.compile(r"/tmp|/work|/root|/home|site-packages|Traceback|\.py\b|File \"", re.IGNORECASE)
PNG = corpus.png_bytes(320, 240)
CASES = corpus.hostile_cases()
# A bomb between Pillow's soft and hard limits makes it warn before our own check refuses it.
pytestmark = pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")


@pytest.fixture(scope="module")
def engine() -> Iterator[FakeEngine]:
    with FakeEngine() as fake:
        yield fake


@pytest.fixture(scope="module")
def app(engine: FakeEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveApp]:
    log_dir = str(tmp_path_factory.mktemp("logs"))
    settings = settings_for(engine, app={"log_dir": log_dir}, client={"max_retries": 0},
                            admission={"enabled": False})
    with LiveApp(settings) as live:
        yield live


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def post(app: LiveApp, engine: FakeEngine, body: Any, *, raw: bytes | None = None,
         headers: dict[str, str] | None = None) -> httpx.Response:
    """POST /api/ocr and check what every refusal shares: no engine request, nothing leaked."""
    before = len(engine.requests)
    content = raw if raw is not None else json.dumps(body).encode()
    response = httpx.post(app.url + "/api/ocr", content=content, timeout=60,
                          headers={"content-type": "application/json", **(headers or {})})
    assert len(engine.requests) == before, "the engine was asked to read a refused input"
    assert not LEAKS.search(response.text), response.text[:500]
    error = refusal(response)
    assert error["message"] and "\n" not in error["message"] and len(error["message"]) < 300
    return response


def refusal(response: httpx.Response) -> dict[str, str]:
    """The error of a refused request: the JSON error, or (NDJSON) the failed page of the last event.

    Most inputs are refused before the answer starts. A file whose header is fine but whose pixels are
    broken (a truncated PNG) is found only when its page is decoded; a streamed answer has already sent
    200 by then, so the page itself carries the code.
    """
    if response.headers["content-type"].startswith("application/x-ndjson"):
        last = json.loads(response.text.splitlines()[-1])
        assert last["event"] == "done" and [p["status"] for p in last["pages"]] == ["failed"], last
        return {"code": last["pages"][0]["error_code"], "message": last["pages"][0]["error"]}
    return response.json()["error"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "ndjson"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_hostile_upload_gets_its_own_code_and_message_and_never_reaches_the_engine(
        app: LiveApp, engine: FakeEngine, case: corpus.Case, stream: bool) -> None:
    response = post(app, engine, {"file": b64(case.data), "pages": case.pages, "stream": stream})
    error = refusal(response)
    assert response.status_code == (200 if response.headers["content-type"].endswith("ndjson")
                                    else case.expected.http_status)
    assert error["code"] == case.expected.code, error
    assert case.message_has in error["message"]


@pytest.mark.timeout(60)
def test_a_pdf_without_pages_is_corrupt_even_right_after_an_encrypted_one(app: LiveApp, engine: FakeEngine) -> None:
    # PDFium's last-error value is process-wide: it used to leak "password" into the next failed load.
    assert post(app, engine, {"file": b64(corpus.encrypted_pdf())}).json()["error"]["code"] == "encrypted_pdf"
    assert post(app, engine, {"file": b64(corpus.blank_pdf(0))}).json()["error"]["code"] == "corrupt_file"


OPTION_CASES = {
    "ten_thousand_fields": ({"preset": "fields", "options": {"fields": [f"field {i}" for i in range(10_000)]}},
                            "Too many fields: 10000"),
    "fields_as_one_huge_string": ({"preset": "fields", "options": {"fields": ",".join(["x"] * 50_000)}},
                                  "Too many fields: 50000"),
    "prompt_of_a_million_characters": ({"options": {"prompt": "read this " * 100_000}}, "at most 4000"),
    "question_of_a_hundred_thousand_characters": ({"preset": "question", "options": {"question": "why? " * 20_000}},
                                                  "at most 4000"),
    "only_control_characters_as_prompt": ({"options": {"prompt": "\u0000\u001b\u0007" * 10}}, "prompt is empty"),
    "lone_surrogates_as_question": ({"preset": "question", "options": {"question": "\ud800\udfff\ud83d"}},
                                    "Type a question"),
    "unknown_target_language": ({"preset": "translate", "options": {"target_language": "Klingon"}},
                                "English or Chinese"),
    "unknown_preset": ({"preset": "../../etc/passwd"}, "Unknown task"),
    "unknown_field_in_body": ({"path": "/etc/passwd"}, "Unknown field 'path'"),
    "fields_as_a_number": ({"preset": "fields", "options": {"fields": 42}}, "options.fields"),
    "negative_max_tokens": ({"max_tokens": -1}, "max_tokens"),
    "page_range_of_ten_thousand_characters": ({"pages": "1," * 5000}, "pages"),
    "file_is_not_base64": ({"file": "this is not base64 !!!"}, "base64"),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(OPTION_CASES))
def test_hostile_options_are_refused_with_a_clear_message(app: LiveApp, engine: FakeEngine, name: str) -> None:
    extra, fragment = OPTION_CASES[name]
    body = {"file": b64(PNG), **extra}
    response = post(app, engine, body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_options"
    assert fragment in error["message"], error["message"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("raw", "fragment"), [
    (b"\xff\xfe{\"file\": \"\x80\x81\"}", "JSON object"),  # not UTF-8 at all
    (b'{"file": "' + b64(PNG).encode() + b'", "options": {"question": "\xc3\x28"}}', "JSON object"),  # bad UTF-8
    (b"[1, 2, 3]", "JSON object"),
    (b"", "JSON object"),
    (b'{"file": ' * 10_000, "JSON object"),  # deeply nested and unterminated
    (b"[" * 100_000 + b"]" * 100_000, "JSON object"),  # valid JSON, nested past the parser's recursion limit
], ids=["utf16_bom_and_bytes", "invalid_utf8_in_an_option", "json_array", "empty_body", "unterminated_nesting",
        "nesting_past_the_recursion_limit"])
def test_a_body_that_is_not_a_utf8_json_object_is_refused(app: LiveApp, engine: FakeEngine, raw: bytes,
                                                          fragment: str) -> None:
    response = post(app, engine, None, raw=raw)
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_options"
    assert fragment in response.json()["error"]["message"]


@pytest.mark.timeout(120)
def test_the_app_still_reads_a_good_page_after_all_the_hostile_input(app: LiveApp, engine: FakeEngine) -> None:
    before = len(engine.requests)
    response = httpx.post(app.url + "/api/ocr", json={"file": b64(PNG)}, timeout=60)
    assert response.status_code == 200 and response.json()["pages"][0]["status"] == "done"
    assert len(engine.requests) == before + 1
    image_url = engine.requests[-1]["messages"][-1]["content"][0]["image_url"]["url"]
    assert image_url.startswith("data:image/jpeg;base64,")
