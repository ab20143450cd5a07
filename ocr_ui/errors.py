"""The one exception tree of the workbench.

Every error raised on purpose is an ``OcrError``. ``str(exc)`` is always safe to show a user: it never
contains a server path, a stack trace or an engine's raw response. ``code`` is a stable machine-readable
name (used by the JSON API, metrics labels and failure records); ``http_status`` is what the JSON API
answers with. Foreign exceptions are translated at one place per boundary with ``raise ... from exc``.

This module imports nothing from ``ocr_ui``.
"""

from __future__ import annotations


class OcrError(Exception):
    """Base of every error the workbench raises on purpose."""

    code = "error"
    http_status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


# --------------------------------------------------------------------------- startup


class ConfigError(OcrError):
    """The configuration is invalid: the process exits with status 2."""

    code = "config_invalid"
    http_status = 500


# --------------------------------------------------------------------------- user input


class InputError(OcrError):
    """The user can fix it: a different file, fewer pages, other options."""

    code = "input_invalid"
    http_status = 400


class UnsupportedFileType(InputError):
    code = "unsupported_type"
    http_status = 415


class EmptyFile(InputError):
    code = "empty_file"


class CorruptFile(InputError):
    code = "corrupt_file"


class FileTooLarge(InputError):
    code = "file_too_large"
    http_status = 413


class TooManyPages(InputError):
    code = "too_many_pages"


class InvalidPageRange(InputError):
    code = "invalid_page_range"


class EncryptedPdf(InputError):
    code = "encrypted_pdf"


class ImageTooLarge(InputError):
    """Too many pixels to decode safely (a decompression bomb or a page the size of a wall)."""

    code = "image_too_large"
    http_status = 413


class ImageTooSmall(InputError):
    code = "image_too_small"


class AspectRatioOutOfRange(InputError):
    code = "aspect_ratio_out_of_range"


class InvalidOptions(InputError):
    """A preset option is missing or out of bounds (no fields given, prompt too long, bad language)."""

    code = "invalid_options"


class AccessDenied(InputError):
    code = "access_denied"
    http_status = 401


class RateLimited(InputError):
    code = "rate_limited"
    http_status = 429


# --------------------------------------------------------------------------- the engine


class BackendError(OcrError):
    """The engine could not produce an answer; usually worth trying again later."""

    code = "engine_error"
    http_status = 502


class EngineUnavailable(BackendError):
    """Nothing answers at the engine's address (down, or still loading the model)."""

    code = "engine_unavailable"
    http_status = 503


class EngineStarting(EngineUnavailable):
    code = "engine_starting"


class EngineTimeout(BackendError):
    code = "engine_timeout"
    http_status = 504


class EngineBusy(BackendError):
    """The engine or the app's admission control is saturated: try again shortly."""

    code = "engine_busy"
    http_status = 503


class CircuitOpen(EngineBusy):
    """The engine failed repeatedly; requests are held off until a probe succeeds."""

    code = "circuit_open"


class EngineRejected(BackendError):
    """The engine refused the request as invalid (HTTP 4xx), e.g. the page does not fit the context."""

    code = "engine_rejected"
    http_status = 422


class StreamBroken(BackendError):
    """The engine's answer stopped in the middle (crash, malformed chunk, error event)."""

    code = "stream_broken"
    http_status = 502
