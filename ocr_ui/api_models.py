"""The JSON shapes of ``POST /api/ocr``: request body, per-page results and streamed events.

Bad bodies become ``InvalidOptions`` naming the offending field (never echoing its value, which may be a
megabyte of base64). Results are built from the service's ``JobUpdate`` so the API and the UI report the
same statuses, texts and error codes.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ocr_ui.errors import InvalidOptions
from ocr_ui.prompts import TaskOptions
from ocr_ui.spotting import boxes_to_dicts, parse_spotting


class ApiOptions(BaseModel):
    """Preset inputs: the same ones the UI shows."""

    model_config = ConfigDict(extra="forbid")

    fields: list[str] | str = Field(default_factory=list, description="Field names for the 'fields' preset.")
    target_language: str = Field("English", description="English or Chinese, for the 'translate' preset.")
    question: str = Field("", description="The question for the 'question' preset.")
    language_hint: str = Field("", description="Language of the document (1.0 profile only).")
    prompt: str = Field("", description="Use this exact prompt instead of the preset's.")

    def task_options(self) -> TaskOptions:
        """The service's option record; a comma-separated string of fields is split."""
        fields = self.fields.split(",") if isinstance(self.fields, str) else self.fields
        return TaskOptions(fields=tuple(f.strip() for f in fields if f.strip()), target_language=self.target_language,
                           question=self.question, language_hint=self.language_hint, prompt_override=self.prompt)


class ApiRequest(BaseModel):
    """The body of ``POST /api/ocr``."""

    model_config = ConfigDict(extra="forbid")

    file: str = Field(description="The image or PDF, base64-encoded (a data: URL prefix is accepted).")
    filename: str = Field("", max_length=255, description="Original file name, for the records only.")
    preset: str = Field("text", max_length=40, description="Task key, see GET /api/presets or the UI.")
    options: ApiOptions = Field(default_factory=ApiOptions)
    pages: str | None = Field(None, max_length=200, description="Page range such as '1-3,7' (PDF).")
    max_tokens: int | None = Field(None, ge=1, le=131072, description="Longest answer per page.")
    stream: bool = Field(False, description="Answer with NDJSON events while pages are read.")

    def file_bytes(self) -> bytes:
        """The decoded upload; invalid base64 is the caller's mistake."""
        data = self.file
        if data.startswith("data:"):
            data = data.partition(",")[2]
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise InvalidOptions("'file' must be the file's bytes encoded as base64.") from exc


def parse_request(raw: bytes) -> ApiRequest:
    """Validate a request body; the message names the first bad field and what is wrong with it."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # RecursionError: '[[[[...' nested too deep
        raise InvalidOptions("The request body must be a JSON object.") from exc
    if not isinstance(body, dict):
        raise InvalidOptions("The request body must be a JSON object.")
    try:
        return ApiRequest.model_validate(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "body"
        if err["type"] == "extra_forbidden":
            raise InvalidOptions(f"Unknown field '{where[:60]}' in the request.") from None
        if err["type"] == "missing":
            raise InvalidOptions(f"The request needs the field '{where}'.") from None
        raise InvalidOptions(f"Field '{where}': {err['msg']}.") from None


def page_dict(page: Any, preset_output: str) -> dict[str, Any]:
    """One page of the answer; spotting pages carry boxes in source pixels (``box``) and 0-1000 (``box_norm``)."""
    out: dict[str, Any] = {"page": page.number, "status": page.status, "text": page.text, "error": page.error,
                           "error_code": page.error_code, "finish_reason": page.finish_reason,
                           "output_tokens": page.output_tokens,  # streamed lines are coalesced: they count no tokens
                           "image_tokens": page.image_tokens or None, "degraded": page.degraded,
                           "timings": _timings(page)}
    if preset_output == "spotting" and page.text:
        # Boxes are relative to the original page, so they are scaled to its size, not to the size sent.
        out["boxes"] = boxes_to_dicts(parse_spotting(page.text), page.source_width or 1000, page.source_height or 1000)
    return out


def _timings(page: Any) -> dict[str, float]:
    """Where the page's time went, in seconds (ms precision); a phase it never reached is left out."""
    phases = {"render_s": page.render_s, "queue_wait_s": page.queue_wait_s, "ttft_s": page.ttft_s,
              "elapsed_s": page.elapsed_s}
    return {name: round(value, 3) for name, value in phases.items() if value is not None}


def final_answer(update: Any, preset_output: str) -> dict[str, Any]:
    """The whole answer: request id, every page, done flag."""
    return {"request_id": update.request_id, "pages": [page_dict(p, preset_output) for p in update.pages],
            "done": update.done}


class EventTracker:
    """Turns successive ``JobUpdate`` snapshots into NDJSON ``page`` events carrying only new text.

    With ``text_due=False`` a page whose only news is more text (its first text excepted) is held back:
    the next due call sends everything since in one delta, so a fast stream costs a line per interval,
    not a line per chunk, and the concatenated deltas stay exactly the page's text.
    """

    def __init__(self) -> None:
        self._sent: dict[int, tuple[int, str]] = {}  # page -> (characters sent, status sent)

    def events(self, update: Any, *, text_due: bool = True) -> list[dict[str, Any]]:
        """Events for what changed since the last sent event (text deltas and status changes)."""
        out = []
        for page in update.pages:
            sent_len, sent_status = self._sent.get(page.number, (0, ""))
            shrunk = len(page.text) < sent_len  # the repetition guard cut the tail: resend the whole text
            delta = "" if shrunk else page.text[sent_len:]
            if not delta and not shrunk and page.status == sent_status:
                continue
            if not text_due and sent_len and not shrunk and page.status == sent_status:
                continue  # only more text, and some already went out: it rides with the next due line
            self._sent[page.number] = (len(page.text), page.status)
            event = {"event": "page", "request_id": update.request_id, "page": page.number, "total": update.total,
                     "status": page.status, "delta": delta, "error": page.error, "error_code": page.error_code,
                     "finish_reason": page.finish_reason}
            if shrunk:
                event["text"] = page.text
            out.append(event)
        return out
