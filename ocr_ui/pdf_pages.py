"""PDF pages through pypdfium2: count them cheaply, measure one, render one at an exact pixel size.

PDFium is not thread-safe, not even across different documents, and the app renders from worker
threads (``asyncio.to_thread``). Every PDFium call therefore runs under one process-wide lock, and no
PDFium object outlives the locked block that made it (a finalizer running later in another thread would
call PDFium unlocked). A render at the sizes the app sends (at most ~2048 px a side) takes tens of
milliseconds, so serialising them costs little next to the engine's seconds per page.

PDFium's failures are translated here, in one place, into the ``InputError`` tree.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
from PIL import Image

from ocr_ui.errors import CorruptFile, EncryptedPdf, ImageTooLarge, InputError

T = TypeVar("T")
POINTS_PER_INCH = 72.0

# Process-wide because PDFium's global state is process-wide (see the module docstring).
_PDFIUM_LOCK = threading.Lock()


@contextmanager
def _opened(data: bytes) -> Iterator[pdfium.PdfDocument]:
    """The document, opened and closed under the lock; PDFium's load errors become InputErrors."""
    with _PDFIUM_LOCK:
        try:
            doc = pdfium.PdfDocument(data)
        except pdfium.PdfiumError as exc:
            raise _load_error(exc.err_code, data) from exc
        try:
            yield doc
        finally:
            doc.close()


def _load_error(err_code: int | None, data: bytes) -> InputError:
    # PDFium's last error is process-wide and some load failures (a PDF without pages) leave it unset,
    # so it can still say "password" from an earlier encrypted upload. Only a file whose trailer names
    # an /Encrypt dictionary (never compressed, even with xref streams) can really be encrypted.
    if err_code in (pdfium_c.FPDF_ERR_PASSWORD, pdfium_c.FPDF_ERR_SECURITY) and b"/Encrypt" not in data:
        err_code = pdfium_c.FPDF_ERR_FORMAT
    if err_code == pdfium_c.FPDF_ERR_PASSWORD:
        return EncryptedPdf("The PDF is protected by a password. Remove the password (for example print it to a "
                            "new PDF) and upload it again.")
    if err_code == pdfium_c.FPDF_ERR_SECURITY:
        return EncryptedPdf("The PDF uses an encryption scheme that cannot be opened. Save an unencrypted copy "
                            "and upload it again.")
    return CorruptFile("The PDF file is damaged or incomplete and cannot be read.")


def _guarded(data: bytes, work: Callable[[pdfium.PdfDocument], T]) -> T:
    with _opened(data) as doc:
        try:
            return work(doc)
        except pdfium.PdfiumError as exc:
            raise CorruptFile("The PDF file is damaged and its pages cannot be read.") from exc


def page_count(data: bytes) -> int:
    """Pages in the document; parses the cross-reference table only, renders nothing."""
    count = _guarded(data, len)
    if count < 1:
        raise CorruptFile("The PDF has no pages.")
    return count


def check_page_inches(number: int, width_pt: float, height_pt: float, max_inches: float) -> None:
    """Refuse a page larger than ``max_inches`` on a side (a poster, a plan, a hostile MediaBox)."""
    w_in, h_in = width_pt / POINTS_PER_INCH, height_pt / POINTS_PER_INCH
    if max(w_in, h_in) > max_inches:
        raise ImageTooLarge(f"Page {number} measures {w_in:.0f} x {h_in:.0f} inches; pages up to {max_inches:g} "
                            "inches on a side are accepted.")


def render_page_fitted(data: bytes, number: int,
                       fit: Callable[[float, float], tuple[int, int]]) -> tuple[tuple[float, float], Image.Image]:
    """(page size in points, page ``number`` rendered straight to ``fit(width_pt, height_pt)`` pixels).

    ``fit`` sees the page's size in points (after its /Rotate) and may refuse it by raising. The render
    scale is chosen from the fitted size, so a wall-sized page never becomes a wall-sized bitmap; the
    document is opened once for both steps.
    """

    def work(doc: pdfium.PdfDocument) -> tuple[tuple[float, float], Image.Image]:
        doc.init_forms()  # filled-in form fields are part of what the user wants read
        page = doc[number - 1]
        try:
            w_pt, h_pt = page.get_size()
            width, height = fit(w_pt, h_pt)
            scale = max(width / max(w_pt, 1e-3), height / max(h_pt, 1e-3))
            bitmap = page.render(scale=scale, fill_color=(255, 255, 255, 255), may_draw_forms=True)
            try:
                image = bitmap.to_pil().convert("RGB")  # to_pil shares the bitmap's buffer: copy before close
            finally:
                bitmap.close()
        finally:
            page.close()
        if image.size != (width, height):
            image = image.resize((width, height), Image.Resampling.LANCZOS)
        return (w_pt, h_pt), image

    return _guarded(data, work)
