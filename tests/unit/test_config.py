"""Config: defaults, bounds, environment precedence, unknown keys, and that every key is documented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from ocr_ui.config import DEFAULT_CONFIG_PATH, Settings, in_flight_limit, iter_keys, load_config, main
from ocr_ui.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_config_loads_and_equals_the_declared_defaults() -> None:
    assert load_config(DEFAULT_CONFIG_PATH, {}) == Settings()


def test_every_declared_key_is_present_in_config_yaml_and_every_yaml_key_is_declared() -> None:
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text(encoding="utf-8"))
    in_yaml = {f"{section}.{key}" for section, values in data.items() for key in values}
    declared = {name for name, *_ in iter_keys()}
    assert in_yaml == declared


def test_every_key_has_a_description_and_appears_in_the_readme_table() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name, _default, _bounds, description in iter_keys():
        assert description.strip(), name
        assert f"`{name}`" in readme, f"{name} missing from README configuration table"


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("engine:\n  max_num_seqs: 8\n", encoding="utf-8")
    assert load_config(cfg, {}).engine.max_num_seqs == 8
    assert load_config(cfg, {"OCR_UI__ENGINE__MAX_NUM_SEQS": "32"}).engine.max_num_seqs == 32


def test_environment_can_set_lists_and_secrets_without_revealing_them() -> None:
    s = load_config(None, {"OCR_UI__APP__API_TOKENS": "[abc, def]", "OCR_UI__ENGINE__API_KEY": "s3cret"})
    assert [t.get_secret_value() for t in s.app.api_tokens] == ["abc", "def"]
    assert s.engine.api_key is not None and "s3cret" not in repr(s) and "s3cret" not in str(s.model_dump_json())


def test_unknown_key_in_file_names_the_key(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("engine:\n  swap_space: 4\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"unknown setting 'engine\.swap_space'"):
        load_config(cfg, {})


def test_unknown_environment_variable_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="OCR_UI__ENGIN__PORT"):
        load_config(None, {"OCR_UI__ENGIN__PORT": "1"})


def test_out_of_bounds_value_is_refused_with_the_key() -> None:
    with pytest.raises(ConfigError, match=r"engine\.gpu_memory_utilization"):
        load_config(None, {"OCR_UI__ENGINE__GPU_MEMORY_UTILIZATION": "1.5"})


def test_login_needs_both_user_and_password() -> None:
    with pytest.raises(ConfigError, match="login_password"):
        load_config(None, {"OCR_UI__APP__LOGIN_USER": "staff"})


def test_missing_explicit_config_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml", {})


def test_defaults_bind_to_loopback_and_share_nothing() -> None:
    s = Settings()
    assert s.app.host == "127.0.0.1" and s.engine.host == "127.0.0.1" and s.app.share is False


def test_cli_show_masks_secrets(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OCR_UI__ENGINE__API_KEY", "topsecret")
    assert main(["show"]) == 0
    out = capsys.readouterr().out
    assert "topsecret" not in out and re.search(r'"api_key": "\*+"', out)


def test_cli_reports_bad_config_with_exit_2(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OCR_UI__ENGINE__MAX_NUM_SEQS", "0")
    assert main(["vllm-args"]) == 2
    assert capsys.readouterr().err.startswith("error: setting 'engine.max_num_seqs'")


def test_in_flight_limit_is_derived_from_the_engine_unless_set() -> None:
    derived = load_config(None, {"OCR_UI__ENGINE__MAX_NUM_SEQS": "16"})
    assert in_flight_limit(derived) == 24  # 16 x 1.5: the engine always has the next pages queued
    assert in_flight_limit(load_config(None, {"OCR_UI__ENGINE__MAX_NUM_SEQS": "5"})) == 8  # rounded up
    assert in_flight_limit(derived, max_num_seqs=144) == 216
    fixed = load_config(None, {"OCR_UI__CLIENT__MAX_IN_FLIGHT": "10", "OCR_UI__ENGINE__DATA_PARALLEL_SIZE": "2"})
    assert in_flight_limit(fixed) == 20  # per replica, times data parallelism
