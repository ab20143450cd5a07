"""The engine sizing arithmetic: a 24 GiB card, an H200, fp8, data and tensor parallel, checkpoints."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ocr_ui import engine_args, sizing
from ocr_ui.config import load_config
from ocr_ui.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
H200_GIB = 143771 / 1024  # what nvidia-smi reports for an H200, in GiB


def settings(**overrides: object):
    environ = {}
    for dotted, value in overrides.items():
        section, key = dotted.split("__")
        environ[f"OCR_UI__{section.upper()}__{key.upper()}"] = str(value)
    return load_config(None, environ)


def test_hunyuan_kv_cache_costs_96_kib_per_token_in_bf16() -> None:
    shape = sizing.model_shape("tencent/HunyuanOCR")
    assert shape.kv_bytes_per_token(2) == 24 * 8 * 128 * 2 * 2 == 96 * 1024


def test_hunyuan_weights_are_about_two_gigabytes_and_fp8_halves_the_llm_layers() -> None:
    shape = sizing.model_shape("tencent/HunyuanOCR")
    bf16, fp8 = shape.weight_bytes(2, fp8=False), shape.weight_bytes(2, fp8=True)
    assert 1.8e9 < bf16 < 2.2e9
    llm_linear = 24 * (1024 * 16 * 128 * 2 + 1024 * 8 * 128 * 2 + 3 * 1024 * 3584)
    assert bf16 - fp8 == llm_linear  # two bytes became one for exactly the LLM's linear weights


def test_a_24_gib_card_runs_about_twenty_full_size_requests() -> None:
    plan = sizing.plan_for(settings(), gpu_memory_gb=24)
    # 4162 image tokens (2048 px page) + 256 prompt + 4096 output = 8514, rounded up to 256.
    assert plan.need_tokens == 8514 and plan.max_model_len == 8704
    assert plan.max_num_seqs == plan.kv_tokens // 8704
    assert 16 <= plan.max_num_seqs <= 24
    assert plan.max_num_batched_tokens == 8704  # small card: one page per step
    budget = 24 * 0.85
    assert plan.kv_gib == pytest.approx(budget - plan.weight_gib - plan.reserve_gib)


def test_an_h200_is_bounded_well_below_its_kv_capacity() -> None:
    plan = sizing.plan_for(settings(), gpu_memory_gb=H200_GIB)
    assert plan.kv_tokens > 1_200_000
    assert 100 <= plan.max_num_seqs <= sizing.MAX_SEQS_PER_REPLICA
    assert plan.max_num_batched_tokens == 2 * plan.max_model_len  # large card: two pages per step


def test_the_cap_of_256_sequences_applies_when_requests_are_short() -> None:
    plan = sizing.plan_for(settings(generation__max_tokens_cap=256, images__max_side=512), gpu_memory_gb=H200_GIB)
    assert plan.fits_seqs > 256 and plan.max_num_seqs == 256


def test_the_calibration_reproduces_the_measured_h200_kv_capacity() -> None:
    # Measured: 1.34 M KV tokens at utilization 0.9, max_model_len 4096, 8192 batched tokens.
    plan = sizing.plan_for(settings(engine__gpu_memory_utilization=0.9, generation__max_tokens_cap=256,
                                    images__max_side=1920), gpu_memory_gb=H200_GIB)
    kv = (H200_GIB * 0.9 - plan.weight_gib - (sizing.RESERVE_FIXED_GIB + 8192 * 96 * 1024 / 2**30)) * 2**30 / 98304
    assert 1.32e6 < kv < 1.36e6


def test_fp8_leaves_more_room_for_kv_cache() -> None:
    plain = sizing.plan_for(settings(), gpu_memory_gb=24)
    fp8 = sizing.plan_for(settings(engine__quantization="fp8"), gpu_memory_gb=24)
    assert fp8.weight_gib < plain.weight_gib and fp8.kv_tokens > plain.kv_tokens
    assert "fp8 weights" in fp8.explain()


def test_tensor_parallel_splits_weights_and_kv_heads_per_gpu() -> None:
    one = sizing.plan_for(settings(), gpu_memory_gb=24)
    two = sizing.plan_for(settings(engine__tensor_parallel_size=2), gpu_memory_gb=24)
    assert two.weight_gib == pytest.approx(one.weight_gib / 2)
    assert two.kv_bytes_per_token == one.kv_bytes_per_token // 2
    assert two.max_num_seqs > 2 * one.max_num_seqs - 2  # twice the memory per replica, a little more room


def test_tensor_parallel_beyond_the_kv_heads_replicates_them() -> None:
    shape = sizing.model_shape("tencent/HunyuanOCR")
    assert shape.kv_bytes_per_token(2, tp=16) == shape.kv_bytes_per_token(2, tp=8)


def test_data_parallel_sizes_each_replica_and_multiplies_the_total() -> None:
    plan = sizing.plan_for(settings(engine__data_parallel_size=2), gpu_memory_gb=24)
    alone = sizing.plan_for(settings(), gpu_memory_gb=24)
    assert plan.max_num_seqs == alone.max_num_seqs and plan.total_seqs == 2 * alone.max_num_seqs
    assert f"data parallel: 2 x {plan.max_num_seqs} = {plan.total_seqs} requests at once" in plan.explain()


def test_float32_doubles_kv_bytes_per_token() -> None:
    plan = sizing.plan_for(settings(engine__dtype="float32"), gpu_memory_gb=24)
    assert plan.kv_bytes_per_token == 192 * 1024


def test_a_card_too_small_for_one_request_is_a_config_error_that_says_what_to_lower() -> None:
    with pytest.raises(ConfigError, match=r"cannot hold one full request.*max_tokens_cap"):
        sizing.plan_for(settings(), gpu_memory_gb=4)


def test_without_nvidia_smi_or_a_size_the_error_says_to_pass_one() -> None:
    def no_gpu() -> list[float]:
        raise ConfigError("cannot size the engine: nvidia-smi was not found. Pass --gpu-memory-gb")

    with pytest.raises(ConfigError, match="--gpu-memory-gb"):
        sizing.plan_for(settings(), query=no_gpu)


def test_nvidia_smi_output_is_read_in_mib_and_the_smallest_gpu_wins() -> None:
    def fake_run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        assert cmd[0] == "nvidia-smi"
        return subprocess.CompletedProcess(cmd, 0, stdout="143771\n24564\n", stderr="")

    sizes = sizing.query_gpu_memory_gib(run=fake_run)
    assert sizes == pytest.approx([143771 / 1024, 24564 / 1024])
    plan = sizing.plan_for(settings(), query=lambda: sizes)
    assert plan.gpu_memory_gib == pytest.approx(24564 / 1024) and "smallest of 2" in plan.memory_source


def test_nvidia_smi_garbage_is_a_config_error() -> None:
    def fake_run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(cmd, 0, stdout="[N/A]\n", stderr="")

    with pytest.raises(ConfigError, match="did not report"):
        sizing.query_gpu_memory_gib(run=fake_run)


def test_a_local_checkpoint_config_decides_the_kv_cost(tmp_path: Path) -> None:
    config = {"architectures": ["HunYuanVLForConditionalGeneration"],
              "text_config": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                              "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128,
                              "vocab_size": 1000, "max_position_embeddings": 4096},
              "vision_config": {"hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    plan = sizing.plan_for(settings(model__path=str(tmp_path)), gpu_memory_gb=24)
    assert plan.kv_bytes_per_token == 2 * 2 * 16 * 2 * 2
    assert plan.max_model_len == 4096  # capped at the model's context
    assert "config.json of the local checkpoint" in plan.explain() and any("shrunk" in n for n in plan.notes)


def test_an_unreadable_checkpoint_config_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"config\.json could not be read"):
        sizing.model_shape(str(tmp_path))


def test_explain_shows_every_step_of_the_arithmetic() -> None:
    text = sizing.plan_for(settings(), gpu_memory_gb=24).explain()
    for needle in ("24.0 GiB", "gpu_memory_utilization 0.85", "weights:", "reserve:", "96 KiB per token",
                   "4162 image tokens", "max_model_len 8704", "max_num_seqs"):
        assert needle in text


def test_engine_args_auto_uses_the_plan() -> None:
    flags = engine_args.render(settings(), auto=True, gpu_memory_gb=24)
    plan = sizing.plan_for(settings(), gpu_memory_gb=24)
    assert flags[flags.index("--max-num-seqs") + 1] == str(plan.max_num_seqs)
    assert flags[flags.index("--max-model-len") + 1] == "8704"


def test_the_config_cli_prints_sized_flags_and_the_arithmetic() -> None:
    done = subprocess.run([sys.executable, "-m", "ocr_ui.config", "vllm-args", "--auto", "--gpu-memory-gb", "24",
                           "--explain"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    flags = done.stdout.split()
    assert int(flags[flags.index("--max-num-seqs") + 1]) in range(16, 25)
    assert "KV cache:" in done.stderr and "max_num_seqs" in done.stderr


def test_the_config_cli_refuses_a_tiny_card_with_exit_status_2() -> None:
    done = subprocess.run([sys.executable, "-m", "ocr_ui.config", "vllm-args", "--auto", "--gpu-memory-gb", "3"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 2 and done.stderr.startswith("error: a 3 GiB card cannot hold one full request")


def test_a_big_card_gets_api_servers_from_its_cores_and_8_token_stream_chunks() -> None:
    big = sizing.plan_for(settings(), gpu_memory_gb=H200_GIB, cpu_count=32)
    assert big.max_num_seqs >= sizing.FRONTEND_BOUND_SEQS
    assert (big.api_server_count, big.stream_interval) == (4, 8)
    assert "api_server_count min(4, 32 cores // 8) = 4, stream_interval 8" in big.explain()
    assert sizing.plan_for(settings(), gpu_memory_gb=H200_GIB, cpu_count=12).api_server_count == 1
    assert sizing.plan_for(settings(), gpu_memory_gb=H200_GIB, cpu_count=128).api_server_count == 4
    flags = engine_args.render(settings(), auto=True, gpu_memory_gb=H200_GIB, cpu_count=32, device="cuda")
    assert flags[flags.index("--api-server-count") + 1] == "4" and flags[flags.index("--stream-interval") + 1] == "8"


def test_api_servers_and_stream_interval_set_in_the_config_are_kept_by_auto() -> None:
    # 0 (the default) lets --auto plan them; a number the operator chose wins, on a big card too.
    kept = sizing.plan_for(settings(engine__api_server_count=8), gpu_memory_gb=H200_GIB, cpu_count=32)
    assert (kept.api_server_count, kept.stream_interval) == (8, 8)
    assert "api_server_count 8 (set in the config), stream_interval 8 (planned)" in kept.explain()
    both = sizing.plan_for(settings(engine__api_server_count=2, engine__stream_interval=1), gpu_memory_gb=H200_GIB,
                           cpu_count=32)
    assert (both.api_server_count, both.stream_interval) == (2, 1)
    flags = engine_args.render(settings(engine__api_server_count=8), auto=True, gpu_memory_gb=H200_GIB, cpu_count=32,
                               device="cuda")
    assert flags[flags.index("--api-server-count") + 1] == "8"


def test_a_small_card_keeps_one_api_server_and_the_configured_stream_interval() -> None:
    small = sizing.plan_for(settings(), gpu_memory_gb=24, cpu_count=64)
    assert small.max_num_seqs < sizing.FRONTEND_BOUND_SEQS
    assert (small.api_server_count, small.stream_interval) == (1, 1)
    tuned = sizing.plan_for(settings(engine__stream_interval=3), gpu_memory_gb=24, cpu_count=64)
    assert tuned.stream_interval == 3
    flags = engine_args.render(settings(), auto=True, gpu_memory_gb=24, cpu_count=64, device="cuda")
    assert "--api-server-count" not in flags and "--stream-interval" not in flags
