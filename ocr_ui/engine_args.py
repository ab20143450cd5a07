"""vLLM server flags rendered from config, so the launcher never repeats a number.

Spelled as vLLM 0.26+ accepts them: ``--swap-space`` and ``--disable-log-requests`` were removed and
crash startup, so they are refused here too (also inside ``engine.extra_args``).
"""

from __future__ import annotations

import json
from typing import TextIO

from ocr_ui.config import Settings
from ocr_ui.errors import ConfigError

REMOVED_FLAGS = ("--swap-space", "--disable-log-requests")

# Revisions a profile pins when model.revision is empty. HunyuanOCR 1.5 took over the repo root on
# 2026-07; 1.0 lives on at this commit.
PROFILE_REVISIONS = {"hunyuanocr-1.0": "f6af82ee007fe6091b29fb3bb287b491ead41c82", "hunyuanocr-1.5": ""}


def revision_for(settings: Settings) -> str:
    """The hub revision to load: the configured one, else the profile's pin (only for hub ids)."""
    if settings.model.revision:
        return settings.model.revision
    if settings.model.path.startswith(("/", ".", "~")):
        return ""
    return PROFILE_REVISIONS[settings.model.profile]


def render(settings: Settings, *, auto: bool = False, gpu_memory_gb: float | None = None, cpu_count: int | None = None,
           explain: TextIO | None = None, device: str | None = None) -> list[str]:
    """The flags after ``vllm serve`` (``python -m vllm.entrypoints.openai.api_server`` on CPU), one list item per token."""
    eng = settings.engine
    max_num_seqs, batched, model_len = eng.max_num_seqs, eng.max_num_batched_tokens, eng.max_model_len
    api_servers, interval = eng.api_server_count or 1, eng.stream_interval or 1  # 0: planned by --auto, else 1
    if auto:
        from ocr_ui import sizing

        plan = sizing.plan_for(settings, gpu_memory_gb=gpu_memory_gb, cpu_count=cpu_count)
        if explain is not None:
            explain.write(plan.explain() + "\n")
        max_num_seqs, batched, model_len = plan.max_num_seqs, plan.max_num_batched_tokens, plan.max_model_len
        api_servers, interval = plan.api_server_count, plan.stream_interval
    device = device or eng.device
    flags = [
        "--model", settings.model.path,
        "--served-model-name", settings.model.served_name,
        "--host", eng.host,
        "--port", str(eng.port),
        "--max-num-seqs", str(max_num_seqs),
        "--max-model-len", str(model_len),
        "--max-num-batched-tokens", str(max(batched, model_len)),
        "--enable-chunked-prefill" if eng.enable_chunked_prefill else "--no-enable-chunked-prefill",
        "--enable-prefix-caching" if eng.enable_prefix_caching else "--no-enable-prefix-caching",
        "--mm-processor-cache-gb", f"{eng.mm_processor_cache_gb:g}",
        "--limit-mm-per-prompt", json.dumps({"image": eng.limit_images_per_prompt}),
        # vLLM picks the model's architecture as a pooling model for some configs; be explicit.
        "--runner", "generate",
    ]
    revision = revision_for(settings)
    if revision:
        flags += ["--revision", revision]
    if settings.model.load_format != "auto":
        flags += ["--load-format", settings.model.load_format]
    if device != "cpu":
        flags += ["--gpu-memory-utilization", f"{eng.gpu_memory_utilization:g}"]
    if interval > 1:
        flags += ["--stream-interval", str(interval)]
    if api_servers > 1 and device != "cpu":  # the CPU build runs the single-process API server
        flags += ["--api-server-count", str(api_servers)]
    if eng.data_parallel_size > 1:
        flags += ["--data-parallel-size", str(eng.data_parallel_size)]
    if eng.tensor_parallel_size > 1:
        flags += ["--tensor-parallel-size", str(eng.tensor_parallel_size)]
    if eng.quantization != "none":
        flags += ["--quantization", eng.quantization]
    dtype = "float32" if device == "cpu" and eng.dtype == "auto" else eng.dtype
    if dtype != "auto":
        flags += ["--dtype", dtype]
    if eng.enforce_eager or device == "cpu":
        flags.append("--enforce-eager")
    for extra in eng.extra_args:
        if extra.split("=", 1)[0] in REMOVED_FLAGS:
            raise ConfigError(f"engine.extra_args: {extra.split('=', 1)[0]} was removed in vLLM 0.26 and stops it starting")
    return flags + list(eng.extra_args)


def engine_env(settings: Settings, device: str) -> dict[str, str]:
    """Environment variables the engine process needs (on top of the caller's)."""
    env = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    if settings.engine.api_key is not None:
        # The key goes through the environment, not --api-key: command lines are visible in `ps`.
        env["VLLM_API_KEY"] = settings.engine.api_key.get_secret_value()
    if device == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = f"{settings.engine.cpu_kv_cache_gb:g}"
    return env
