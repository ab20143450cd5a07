"""House rules that keep the package readable, checked on the source itself (an AST scan)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "ocr_ui"
MODULES = sorted(PKG.glob("*.py"))
GRADIO_MODULES = {"web.py"}  # plus ui.py and ui_*.py


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _imports(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_gradio_is_imported_only_by_the_ui_and_web_modules(path: Path) -> None:
    if path.name in GRADIO_MODULES or path.name == "ui.py" or path.name.startswith("ui_"):
        return
    assert not any(n == "gradio" or n.startswith("gradio.") for n in _imports(_tree(path))), path.name


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_os_environ_is_read_only_in_config(path: Path) -> None:
    if path.name == "config.py":
        return
    src = path.read_text(encoding="utf-8")
    assert "os.environ" not in src and "getenv(" not in src, path.name


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_module_level_semaphores_clients_or_settings(path: Path) -> None:
    banned = {"Semaphore", "AsyncOpenAI", "OpenAI", "load_config", "load_from_process", "Slots", "EngineClient"}
    for node in _tree(path).body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Call):
            func = node.value.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            assert name not in banned, f"{path.name}: module-level {name}()"


def test_there_is_no_utils_module() -> None:
    assert not (PKG / "utils.py").exists()


def test_errors_module_imports_nothing_from_the_package() -> None:
    assert not any(n.startswith("ocr_ui") for n in _imports(_tree(PKG / "errors.py")))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_modules_stay_short(path: Path) -> None:
    assert len(path.read_text(encoding="utf-8").splitlines()) <= 400, f"{path.name} is too long: split it"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_nothing_raises_bare_foreign_exceptions_for_user_errors(path: Path) -> None:
    # A bare `except:` or `except Exception: pass` hides failures; both are banned.
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ExceptHandler):
            assert node.type is not None, f"{path.name}:{node.lineno} bare except"
            if len(node.body) == 1 and isinstance(node.body[0], ast.Pass):
                name = ast.unparse(node.type)
                assert name not in {"Exception", "BaseException"}, f"{path.name}:{node.lineno} swallows {name}"
