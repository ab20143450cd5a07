"""The start-up fixes inside the real engine environment: needed, applied, and no installed file edited."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
WITHOUT_HOOK = "import sys; sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != '_Hook']; "


def _run(python: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300, check=False)


def test_torchvision_imports_in_the_engine_environment_thanks_to_the_hook(engine_python: Path) -> None:
    fixed = _run(engine_python, "import torchvision, torchvision.transforms.v2; print(torchvision.extension._has_ops())")
    assert fixed.returncode == 0, fixed.stderr[-2000:]
    assert fixed.stdout.strip() == "False"  # the CUDA build's C++ ops stay unavailable, as expected
    broken = _run(engine_python, WITHOUT_HOOK + "import torchvision")
    assert broken.returncode != 0 and "torchvision::nms does not exist" in broken.stderr


def test_xdrope_fix_is_applied_by_the_registered_vllm_plugin(engine_python: Path) -> None:
    code = ("from vllm.plugins import load_general_plugins\n"
            "from vllm.model_executor.layers.rotary_embedding.xdrope import XDRotaryEmbedding as X\n"
            "assert 'forward_cpu' not in vars(X), 'vLLM now ships its own forward_cpu: drop the fix'\n"
            "load_general_plugins()\n"
            "print(X.forward_cpu is X.forward_native)\n")
    done = _run(engine_python, code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "True"


def test_no_installed_file_was_patched(engine_python: Path) -> None:
    code = ("import importlib.util, pathlib\n"
            "tv = pathlib.Path(importlib.util.find_spec('torchvision').origin).parent\n"
            "vl = pathlib.Path(importlib.util.find_spec('vllm').origin).parent\n"
            "print('@torch.library.register_fake(\"torchvision::nms\")' in (tv / '_meta_registrations.py').read_text())\n"
            "print('forward_cpu' in (vl / 'model_executor/layers/rotary_embedding/xdrope.py').read_text())\n")
    done = _run(engine_python, code)
    assert done.stdout.split() == ["True", "False"], done.stderr[-2000:]
