"""Generated inputs for the e2e tests: real PNGs and PDFs drawn with Pillow, and chat messages."""

from __future__ import annotations

import base64
import io
from typing import Any

from PIL import Image, ImageDraw

GREEDY: dict[str, Any] = {"temperature": 0.0}
# ignore_eos: the random model then always runs to max_tokens, so lengths are exact.
GREEDY_EXTRA: dict[str, Any] = {"top_k": 1, "ignore_eos": True}


def page_image(text: str = "HELLO 42", size: tuple[int, int] = (96, 64), background: str = "white") -> Image.Image:
    image = Image.new("RGB", size, background)
    draw = ImageDraw.Draw(image)
    draw.text((8, size[1] // 2 - 6), text, fill="black")
    draw.rectangle((2, 2, size[0] - 3, size[1] - 3), outline="red")
    return image


def png_bytes(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def data_url(image: Image.Image) -> str:
    return "data:image/png;base64," + base64.b64encode(png_bytes(image)).decode()


def pdf_bytes(texts: list[str]) -> bytes:
    """A real multi-page PDF (one drawn page per text)."""
    pages = [page_image(t, (320, 200)) for t in texts]
    buf = io.BytesIO()
    pages[0].save(buf, format="PDF", save_all=True, append_images=pages[1:], resolution=72.0)
    return buf.getvalue()


def messages(image: Image.Image, prompt: str = "Read the text in the image.") -> list[dict[str, Any]]:
    """HunyuanOCR's request shape: an empty system message, then the image before the text."""
    return [{"role": "system", "content": ""},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(image)}},
                                         {"type": "text", "text": prompt}]}]
