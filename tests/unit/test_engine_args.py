"""vLLM flags rendered from config: memory-safe, spelled as vLLM 0.26+ accepts them."""

from __future__ import annotations

import json

import pytest

from ocr_ui.config import load_config
from ocr_ui.engine_args import engine_env, render
from ocr_ui.errors import ConfigError


def _flag(flags: list[str], name: str) -> str:
    return flags[flags.index(name) + 1]


def test_default_flags_carry_every_memory_safe_setting() -> None:
    flags = render(load_config(None, {}), device="cuda")
    assert _flag(flags, "--max-num-seqs") == "16"
    assert _flag(flags, "--gpu-memory-utilization") == "0.85"
    assert _flag(flags, "--max-model-len") == "8192"
    assert _flag(flags, "--max-num-batched-tokens") == "8192"
    assert "--enable-chunked-prefill" in flags and "--no-enable-prefix-caching" in flags
    assert _flag(flags, "--mm-processor-cache-gb") == "0"
    assert json.loads(_flag(flags, "--limit-mm-per-prompt")) == {"image": 1}
    assert _flag(flags, "--served-model-name") == "tencent/HunyuanOCR"
    assert _flag(flags, "--host") == "127.0.0.1"


def test_removed_flags_never_appear_and_are_refused_in_extra_args() -> None:
    flags = render(load_config(None, {}), device="cuda")
    assert "--swap-space" not in flags and "--disable-log-requests" not in flags
    with pytest.raises(ConfigError, match="--swap-space"):
        render(load_config(None, {"OCR_UI__ENGINE__EXTRA_ARGS": "['--swap-space=4']"}), device="cuda")


def test_profile_1_0_pins_its_revision_and_1_5_takes_the_repo_root() -> None:
    v10 = render(load_config(None, {"OCR_UI__MODEL__PROFILE": "hunyuanocr-1.0"}), device="cuda")
    assert _flag(v10, "--revision") == "f6af82ee007fe6091b29fb3bb287b491ead41c82"
    assert "--revision" not in render(load_config(None, {}), device="cuda")


def test_local_checkpoint_folder_gets_no_revision() -> None:
    s = load_config(None, {"OCR_UI__MODEL__PROFILE": "hunyuanocr-1.0", "OCR_UI__MODEL__PATH": "/models/hy"})
    assert "--revision" not in render(s, device="cuda")


def test_cpu_device_runs_float32_eager_without_gpu_memory_flag() -> None:
    flags = render(load_config(None, {}), device="cpu")
    assert _flag(flags, "--dtype") == "float32" and "--enforce-eager" in flags
    assert "--gpu-memory-utilization" not in flags
    assert engine_env(load_config(None, {}), "cpu")["VLLM_CPU_KVCACHE_SPACE"] == "2"


def test_api_key_travels_in_the_environment_not_on_the_command_line() -> None:
    s = load_config(None, {"OCR_UI__ENGINE__API_KEY": "k-123"})
    assert "k-123" not in " ".join(render(s, device="cuda"))
    assert engine_env(s, "cuda")["VLLM_API_KEY"] == "k-123"


def test_parallelism_and_quantization_are_passed_through() -> None:
    s = load_config(None, {"OCR_UI__ENGINE__DATA_PARALLEL_SIZE": "2", "OCR_UI__ENGINE__QUANTIZATION": "fp8"})
    flags = render(s, device="cuda")
    assert _flag(flags, "--data-parallel-size") == "2" and _flag(flags, "--quantization") == "fp8"


def test_stream_interval_and_api_servers_are_rendered_only_when_raised() -> None:
    plain = render(load_config(None, {}), device="cuda")
    assert "--stream-interval" not in plain and "--api-server-count" not in plain
    s = load_config(None, {"OCR_UI__ENGINE__STREAM_INTERVAL": "4", "OCR_UI__ENGINE__API_SERVER_COUNT": "3"})
    flags = render(s, device="cuda")
    assert _flag(flags, "--stream-interval") == "4" and _flag(flags, "--api-server-count") == "3"
    # The CPU build runs the single-process API server module, which has no --api-server-count.
    cpu = render(s, device="cpu")
    assert _flag(cpu, "--stream-interval") == "4" and "--api-server-count" not in cpu
