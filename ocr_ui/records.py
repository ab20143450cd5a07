"""Failure records: one JSON line per failed page or request, for later analysis.

A record names the input by its SHA-256 and size, never by its content: documents may be private.
With ``keep_inputs=True`` the input itself is kept in a private folder (0700, files 0600, named by
hash) and the record carries only that file name, never a server path. Appends are guarded by a lock
and written with one ``write`` call to an ``O_APPEND`` file, so threads and event-loop callers may share
one recorder. A record that cannot be written is logged and dropped: analysis must never fail a request.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from ocr_ui.errors import ConfigError, OcrError

log = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 500
_EXTENSIONS = {"png": "png", "jpeg": "jpg", "webp": "webp", "bmp": "bmp", "tiff": "tif", "gif": "gif", "pdf": "pdf"}


def describe_error(exc: BaseException) -> tuple[str, str]:
    """(code, message) safe to store: an ``OcrError``'s own; for anything else only its class name."""
    if isinstance(exc, OcrError):
        return exc.code, str(exc)
    # A foreign exception's text may hold paths or engine internals: keep the type, not the words.
    return "internal_error", f"unexpected {type(exc).__name__}"


class FailureRecorder:
    """Appends failure records to a JSON-lines file (``path``) or an open text stream."""

    def __init__(self, target: str | Path | TextIO, *, keep_inputs: bool = False,
                 inputs_dir: str | Path | None = None) -> None:
        self._lock = threading.Lock()
        self._stream: TextIO | None = None
        self._path: Path | None = None
        if isinstance(target, str | Path):
            self._path = Path(target)
        else:
            self._stream = target
        self.keep_inputs = keep_inputs
        if inputs_dir is not None:
            self.inputs_dir: Path | None = Path(inputs_dir)
        elif self._path is not None:
            self.inputs_dir = self._path.parent / "failed-inputs"
        else:
            self.inputs_dir = None
        if keep_inputs and self.inputs_dir is None:
            raise ConfigError("keep_inputs needs a folder for the inputs (give inputs_dir)")

    def record(self, *, request_id: str, preset: str, data: bytes, input_type: str,
               error: BaseException | None = None, code: str | None = None, message: str | None = None,
               page: int | None = None, ttft_s: float | None = None, elapsed_s: float | None = None,
               ) -> dict[str, Any]:
        """Write one record and return it; the error comes as an exception or as ``code`` + ``message``."""
        if error is not None:
            code, message = describe_error(error)
        digest = hashlib.sha256(data).hexdigest()
        rec: dict[str, Any] = {
            "ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "request_id": request_id,
            "preset": preset,
            "input_type": input_type,
            "input_bytes": len(data),
            "page": page,
            "code": code or "error",
            "message": (message or "")[:MAX_MESSAGE_CHARS],
            "ttft_s": None if ttft_s is None else round(ttft_s, 4),
            "elapsed_s": None if elapsed_s is None else round(elapsed_s, 4),
            "sha256": digest,
        }
        if self.keep_inputs:
            rec["input_file"] = self._keep(data, digest, input_type)
        self._append(json.dumps(rec, ensure_ascii=False) + "\n")
        return rec

    def _keep(self, data: bytes, digest: str, input_type: str) -> str | None:
        folder = self.inputs_dir
        if folder is None:  # refused in __init__; kept for the type checker
            return None
        name = f"{digest[:32]}.{_EXTENSIONS.get(input_type, 'bin')}"  # never the user's file name
        target = folder / name
        try:
            with self._lock:
                folder.mkdir(mode=0o700, parents=True, exist_ok=True)
                os.chmod(folder, 0o700)
                if target.exists():
                    return name  # the same document failed before (another page): stored once
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
        except FileExistsError:
            return name
        except OSError as exc:
            log.warning("could not keep a failed input: %s", exc)
            return None
        return name

    def _append(self, line: str) -> None:
        try:
            with self._lock:
                if self._stream is not None:
                    self._stream.write(line)
                    self._stream.flush()
                    return
                if self._path is None:
                    return
                self._path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    os.write(fd, line.encode("utf-8"))
                finally:
                    os.close(fd)
        except (OSError, ValueError) as exc:  # ValueError: a closed stream
            log.warning("could not write a failure record: %s", exc)
