"""Facts about the served model: image-token arithmetic and sampling defaults per model version.

HunyuanOCR's processor resizes every image to multiples of 32 (16 px patches, 2x2 merge) inside
[min_pixels, max_pixels], then spends ``(H/32) * (W/32 + 1) + 2`` tokens on it (one newline token per
row, plus begin and end). The app sends pages already at such a size so the processor's own resize is
a no-op and the token count is known before the request leaves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

FACTOR = 32  # patch 16 x spatial merge 2


@dataclass(frozen=True)
class ModelProfile:
    """One model version: its pixel limits, sampling defaults and output conventions."""

    name: str
    min_pixels: int
    max_pixels: int
    temperature: float
    top_p: float
    top_k: int
    repetition_penalty: float
    send_system_message: bool  # 1.0 is sensitive to the (empty) system message; 1.5's client omits it
    spotting_format: Literal["hunyuan", "json"]
    prompt_locked: bool  # 1.5's prompts are fixed per task: no language hints appended
    max_image_tokens_note: str = ""
    translation_targets: tuple[str, ...] = field(default=("English", "Chinese"))

    def sampling(self) -> tuple[dict[str, float], dict[str, float]]:
        """(OpenAI keyword arguments, vLLM extra_body) of the official sampling settings."""
        return ({"temperature": self.temperature, "top_p": self.top_p},
                {"top_k": self.top_k, "repetition_penalty": self.repetition_penalty})


PROFILES: dict[str, ModelProfile] = {
    "hunyuanocr-1.0": ModelProfile(
        name="hunyuanocr-1.0", min_pixels=512 * 512, max_pixels=2048 * 2048,
        temperature=0.0, top_p=0.95, top_k=1, repetition_penalty=1.0,
        send_system_message=True, spotting_format="hunyuan", prompt_locked=False,
    ),
    "hunyuanocr-1.5": ModelProfile(
        name="hunyuanocr-1.5", min_pixels=512 * 512, max_pixels=4096 * 4096,
        temperature=0.0, top_p=1.0, top_k=-1, repetition_penalty=1.08,
        send_system_message=False, spotting_format="json", prompt_locked=True,
    ),
}


def get_profile(name: str) -> ModelProfile:
    """The profile called ``name``; config validation already restricts the names."""
    return PROFILES[name]


def processor_size(width: int, height: int, profile: ModelProfile) -> tuple[int, int]:
    """The (width, height) the model's processor resizes an image to (its ``smart_resize``)."""
    h_bar = max(FACTOR, round(height / FACTOR) * FACTOR)
    w_bar = max(FACTOR, round(width / FACTOR) * FACTOR)
    if h_bar * w_bar > profile.max_pixels:
        beta = math.sqrt(height * width / profile.max_pixels)
        h_bar = max(FACTOR, math.floor(height / beta / FACTOR) * FACTOR)
        w_bar = max(FACTOR, math.floor(width / beta / FACTOR) * FACTOR)
    elif h_bar * w_bar < profile.min_pixels:
        beta = math.sqrt(profile.min_pixels / (height * width))
        h_bar = math.ceil(height * beta / FACTOR) * FACTOR
        w_bar = math.ceil(width * beta / FACTOR) * FACTOR
    return w_bar, h_bar


def image_tokens(width: int, height: int, profile: ModelProfile) -> int:
    """Tokens the engine spends on an image of this size, after its processor's resize."""
    w, h = processor_size(width, height, profile)
    return (h // FACTOR) * (w // FACTOR + 1) + 2
