"""Size the engine to the card: max_num_seqs, max_num_batched_tokens and max_model_len from GPU memory.

On a big card (many running requests) it also sizes vLLM's front end: API-server processes from the
CPU cores and a stream interval of a few tokens, because there the API server is the first ceiling.

vLLM pre-allocates its KV cache to ``gpu_memory_utilization``, so an engine never runs out of memory
for KV; it preempts (recomputes) requests instead, which is slow. The plan picks the largest number of
running requests whose *worst case* (a full ``max_model_len`` each: a max_side page, the prompt and
``max_tokens_cap`` output tokens) still fits in the KV cache that is left after weights and the
activation reserve. Real pages usually need far less, so the plan is safe, not tight.

Memory sizes are GiB (2**30 bytes), as nvidia-smi's MiB and vLLM's log lines count them.
``python -m ocr_ui.config vllm-args --auto --gpu-memory-gb 24 --explain`` prints the arithmetic.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ocr_ui.config import IN_FLIGHT_HEADROOM, Settings
from ocr_ui.errors import ConfigError
from ocr_ui.profiles import get_profile, image_tokens

GIB = 2**30

# HunyuanOCR-1.0 shape (config.json of the published checkpoint), used when no local config is given.
HUNYUAN_OCR_1_0: dict[str, int] = {
    "num_hidden_layers": 24, "num_key_value_heads": 8, "head_dim": 128, "hidden_size": 1024,
    "num_attention_heads": 16, "intermediate_size": 3584, "vocab_size": 120818,
    "max_position_embeddings": 32768, "tie_word_embeddings": 1,
    "vision_hidden_size": 1152, "vision_layers": 27, "vision_intermediate_size": 4304,
}
# Patch embedding, position table and the patch merger of the ViT, beyond its transformer layers.
VISION_EXTRA_PARAMS = 40_000_000
# Chat template + the longest preset prompt, in tokens. A longer typed question shrinks the image
# (preprocess.token_budget), so this is an allowance, not a limit.
PROMPT_TOKENS = 256
# Non-KV, non-weight memory: CUDA context, cuBLAS workspaces, CUDA graphs, sampler buffers ...
RESERVE_FIXED_GIB = 1.0
# ... plus the activations of one scheduler step. Calibrated on the H200 run (docs/benchmarks.md):
# 140.4 GiB x 0.9 - 122.7 GiB KV (1.34 M tokens) - 1.85 GiB weights leaves ~1.8 GiB at 8192 tokens.
ACT_BYTES_PER_BATCHED_TOKEN = 96 * 1024
MAX_SEQS_PER_REPLICA = 256  # beyond this vLLM's scheduler and the API server gain little (see the H200 notes)
MAX_BATCHED_TOKENS = 32768
LARGE_CARD_GIB = 40.0  # from here on each step may prefill two full pages
# From this many running requests per replica one vLLM API-server process, not the GPU, is the first
# ceiling (H200, 144 running: 15.3 req/s with the GPU busy 37 % of the time; 4 API servers 20.7;
# plus 8-token stream chunks 21-25; docs/benchmarks.md). Below it the defaults stand.
FRONTEND_BOUND_SEQS = 64
CORES_PER_API_SERVER = 8  # each API server decodes images and streams answers; leave cores to the rest
# 8 API servers measured slower than 4 on a 32-core H200 host (22.0-23.3 vs 26.0-27.2 req/s at 64 clients,
# fresh engines on one machine; its decode steps were slower, 6.0-6.4 vs 5.1-5.4 ms): 4 is the cap.
MAX_API_SERVERS = 4
BUSY_STREAM_INTERVAL = 8  # ~ what the app's 50 ms flush groups anyway at the decode speeds measured


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a checkpoint that decide its memory: weights and KV bytes per token."""

    source: str
    layers: int
    kv_heads: int
    head_dim: int
    hidden: int
    heads: int
    intermediate: int
    vocab: int
    tied: bool
    max_position: int
    vision_hidden: int
    vision_layers: int
    vision_intermediate: int

    def kv_bytes_per_token(self, dtype_bytes: int, tp: int = 1) -> int:
        """K and V of every layer for one token on one tensor-parallel shard (KV heads split over TP)."""
        heads_per_shard = max(1, self.kv_heads // tp)
        return self.layers * heads_per_shard * self.head_dim * 2 * dtype_bytes

    def weight_bytes(self, dtype_bytes: int, fp8: bool) -> int:
        """Weights of ViT + LLM; fp8 stores the LLM's linear layers in one byte (embeddings stay)."""
        attn = self.hidden * self.heads * self.head_dim * 2 + self.hidden * self.kv_heads * self.head_dim * 2
        llm_linear = self.layers * (attn + 3 * self.hidden * self.intermediate)
        embed = self.vocab * self.hidden * (1 if self.tied else 2)
        vision = (self.vision_layers * (4 * self.vision_hidden**2 + 2 * self.vision_hidden * self.vision_intermediate)
                  + VISION_EXTRA_PARAMS)
        return llm_linear * (1 if fp8 else dtype_bytes) + (embed + vision) * dtype_bytes


def _shape_from(values: dict[str, Any], source: str) -> ModelShape:
    hidden = int(values["hidden_size"])
    heads = int(values.get("num_attention_heads", 16))
    return ModelShape(
        source=source, layers=int(values["num_hidden_layers"]),
        kv_heads=int(values.get("num_key_value_heads", heads)),
        head_dim=int(values.get("head_dim") or hidden // heads), hidden=hidden, heads=heads,
        intermediate=int(values.get("intermediate_size", 4 * hidden)), vocab=int(values.get("vocab_size", 120818)),
        tied=bool(values.get("tie_word_embeddings", True)),
        max_position=int(values.get("max_position_embeddings", 32768)),
        vision_hidden=int(values.get("vision_hidden_size", 1152)), vision_layers=int(values.get("vision_layers", 27)),
        vision_intermediate=int(values.get("vision_intermediate_size", 4304)),
    )


def model_shape(model_path: str) -> ModelShape:
    """The shape from ``<model_path>/config.json`` when it is a local checkpoint, else HunyuanOCR-1.0's."""
    config = Path(model_path).expanduser() / "config.json"
    if not config.is_file():
        return _shape_from(dict(HUNYUAN_OCR_1_0), "HunyuanOCR-1.0 constants")
    try:
        raw = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"the model's config.json could not be read: {exc.__class__.__name__}") from exc
    # The published checkpoint is flat; transformers-style ones nest the LLM under text_config.
    values = {**raw, **(raw.get("text_config") or {})}
    vision = raw.get("vision_config") or {}
    values.update({"vision_hidden_size": vision.get("hidden_size", 1152),
                   "vision_layers": vision.get("num_hidden_layers", 27),
                   "vision_intermediate_size": vision.get("intermediate_size", 4304)})
    if "hidden_size" not in values or "num_hidden_layers" not in values:
        raise ConfigError("the model's config.json has no hidden_size / num_hidden_layers")
    return _shape_from(values, "config.json of the local checkpoint")


def query_gpu_memory_gib(run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run) -> list[float]:
    """Total memory of each visible GPU in GiB, from nvidia-smi; ``ConfigError`` when it cannot tell."""
    if run is subprocess.run and shutil.which("nvidia-smi") is None:
        raise ConfigError("cannot size the engine: nvidia-smi was not found (no NVIDIA GPU here?). "
                          "Pass --gpu-memory-gb to plan for a card anyway.")
    try:
        done = run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                   capture_output=True, text=True, timeout=20, check=True)
        sizes = [float(line) / 1024 for line in done.stdout.split() if line.strip()]
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise ConfigError("cannot size the engine: nvidia-smi did not report GPU memory. "
                          "Pass --gpu-memory-gb instead.") from exc
    if not sizes:
        raise ConfigError("cannot size the engine: nvidia-smi lists no GPU. Pass --gpu-memory-gb instead.")
    return sizes


@dataclass(frozen=True)
class Plan:
    """The sized engine flags and every number that led to them (``explain()`` prints the arithmetic)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    gpu_memory_gib: float
    memory_source: str
    utilization: float
    weight_gib: float
    reserve_gib: float
    kv_gib: float
    kv_bytes_per_token: int
    kv_tokens: int
    page_tokens: int
    max_side: int
    prompt_tokens: int
    max_tokens: int
    need_tokens: int
    fits_seqs: int
    data_parallel: int
    tensor_parallel: int
    shape: ModelShape
    dtype_bytes: int
    fp8: bool
    api_server_count: int = 1
    stream_interval: int = 1
    frontend_set: tuple[str, ...] = ()  # which of api_server_count, stream_interval the config set (kept as given)
    cpu_count: int = 1
    notes: tuple[str, ...] = ()

    @property
    def total_seqs(self) -> int:
        """Requests running at once over all data-parallel replicas."""
        return self.max_num_seqs * self.data_parallel

    def explain(self) -> str:
        """The sizing arithmetic, one step a line."""
        tp, dp = self.tensor_parallel, self.data_parallel
        lines = [
            f"model shape: {self.shape.source} ({self.shape.layers} layers, {self.shape.kv_heads} KV heads x "
            f"head_dim {self.shape.head_dim}, {self.dtype_bytes}-byte dtype{', fp8 weights' if self.fp8 else ''})",
            f"GPU memory: {self.gpu_memory_gib:.1f} GiB per GPU ({self.memory_source}); "
            f"{dp} replica(s) x {tp} GPU(s) each = {dp * tp} GPU(s)",
            f"vLLM budget: {self.gpu_memory_gib:.1f} x gpu_memory_utilization {self.utilization:g} = "
            f"{self.gpu_memory_gib * self.utilization:.2f} GiB per GPU",
            f"weights: {self.weight_gib * tp:.2f} GiB{f' / TP {tp} = {self.weight_gib:.2f} GiB per GPU' if tp > 1 else ''}",
            f"reserve: {RESERVE_FIXED_GIB:g} GiB fixed + {self.max_num_batched_tokens} batched tokens x "
            f"{ACT_BYTES_PER_BATCHED_TOKEN * self.dtype_bytes // 2 // 1024} KiB = {self.reserve_gib:.2f} GiB",
            f"KV cache: {self.gpu_memory_gib * self.utilization:.2f} - {self.weight_gib:.2f} - {self.reserve_gib:.2f} = "
            f"{self.kv_gib:.2f} GiB / {self.kv_bytes_per_token // 1024} KiB per token = {self.kv_tokens:,} tokens",
            f"one request, worst case: {self.page_tokens} image tokens ({self.max_side}x{self.max_side} page) + "
            f"{self.prompt_tokens} prompt + {self.max_tokens} max_tokens = {self.need_tokens} -> "
            f"max_model_len {self.max_model_len}",
            f"requests that fit: {self.kv_tokens:,} // {self.max_model_len} = {self.fits_seqs} -> max_num_seqs "
            f"{self.max_num_seqs} (bounded to {MAX_SEQS_PER_REPLICA} per replica)",
            f"max_num_batched_tokens {self.max_num_batched_tokens}",
        ]
        if dp > 1:
            lines.append(f"data parallel: {dp} x {self.max_num_seqs} = {self.total_seqs} requests at once")
        if self.frontend_set:
            def said(key: str, value: int) -> str:
                return f"{key} {value}" + (" (set in the config)" if key in self.frontend_set else " (planned)")
            lines.append(f"frontend: {said('api_server_count', self.api_server_count)}, "
                         f"{said('stream_interval', self.stream_interval)}; 0 in the config lets --auto plan it")
        elif self.max_num_seqs >= FRONTEND_BOUND_SEQS:
            lines.append(f"frontend: {self.max_num_seqs} >= {FRONTEND_BOUND_SEQS} running requests outrun one API "
                         f"server -> api_server_count min({MAX_API_SERVERS}, {self.cpu_count} cores // "
                         f"{CORES_PER_API_SERVER}) = {self.api_server_count}, stream_interval {self.stream_interval} "
                         "(the first token still goes at once)")
        else:
            lines.append(f"frontend: {self.max_num_seqs} running requests: one API server keeps up -> "
                         f"api_server_count {self.api_server_count}, stream_interval {self.stream_interval}")
        lines.append(f"app: give it engine.max_num_seqs {self.max_num_seqs} too; with client.max_in_flight 0 it "
                     f"keeps {math.ceil(self.max_num_seqs * IN_FLIGHT_HEADROOM)} pages open per replica")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def plan_for(settings: Settings, gpu_memory_gb: float | None = None, *,
             query: Callable[[], list[float]] = query_gpu_memory_gib, cpu_count: int | None = None) -> Plan:
    """Size the engine for a card of ``gpu_memory_gb`` GiB (per GPU), else what nvidia-smi reports.

    ``cpu_count`` (default: this machine's) sets how many API-server processes a big card gets.
    """
    eng, profile = settings.engine, get_profile(settings.model.profile)
    dp, tp = eng.data_parallel_size, eng.tensor_parallel_size
    notes: list[str] = []
    if gpu_memory_gb is not None:
        memory, source = float(gpu_memory_gb), "given"
    else:
        sizes = query()
        memory, source = min(sizes), f"nvidia-smi, smallest of {len(sizes)} GPU(s)"
        if len(sizes) < dp * tp:
            notes.append(f"nvidia-smi sees {len(sizes)} GPU(s) but data_parallel x tensor_parallel needs {dp * tp}")
    if memory <= 0:
        raise ConfigError("GPU memory must be a positive number of GiB")
    shape = model_shape(settings.model.path)
    dtype_bytes = 4 if eng.dtype == "float32" else 2
    fp8 = eng.quantization == "fp8"

    max_side = settings.images.max_side
    page = image_tokens(max_side, max_side, profile)
    need = page + PROMPT_TOKENS + settings.generation.max_tokens_cap
    model_len = _round_up(need, 256)
    if model_len > shape.max_position:
        model_len = shape.max_position
        notes.append(f"the model's context is {shape.max_position} tokens: pages are shrunk to fit what is left")

    batched = model_len if memory < LARGE_CARD_GIB else min(MAX_BATCHED_TOKENS, 2 * model_len)
    batched = max(batched, model_len)
    weight = shape.weight_bytes(dtype_bytes, fp8) / tp / GIB
    reserve = RESERVE_FIXED_GIB + batched * ACT_BYTES_PER_BATCHED_TOKEN * dtype_bytes / 2 / GIB
    kv_gib = memory * eng.gpu_memory_utilization - weight - reserve
    kv_per_token = shape.kv_bytes_per_token(dtype_bytes, tp)
    kv_tokens = max(0, math.floor(kv_gib * GIB / kv_per_token))
    fits = kv_tokens // model_len
    if fits < 1:
        raise ConfigError(
            f"a {memory:g} GiB card cannot hold one full request: it needs {model_len} tokens of KV cache "
            f"({model_len * kv_per_token / GIB:.2f} GiB) but {max(kv_gib, 0):.2f} GiB are left after weights "
            f"({weight:.2f} GiB) and reserve ({reserve:.2f} GiB). Lower generation.max_tokens_cap or "
            f"images.max_side, or raise engine.gpu_memory_utilization.")
    seqs = min(MAX_SEQS_PER_REPLICA, fits)
    cpus = max(1, cpu_count or os.cpu_count() or 1)
    # 0 in the config means "plan it"; a number the operator set is kept (and said so by --explain).
    busy = seqs >= FRONTEND_BOUND_SEQS
    api_servers = eng.api_server_count or (min(MAX_API_SERVERS, max(1, cpus // CORES_PER_API_SERVER)) if busy else 1)
    interval = eng.stream_interval or (BUSY_STREAM_INTERVAL if busy else 1)
    return Plan(
        max_num_seqs=seqs, max_num_batched_tokens=batched, max_model_len=model_len,
        gpu_memory_gib=memory, memory_source=source, utilization=eng.gpu_memory_utilization, weight_gib=weight,
        reserve_gib=reserve, kv_gib=kv_gib, kv_bytes_per_token=kv_per_token, kv_tokens=kv_tokens, page_tokens=page,
        max_side=max_side, prompt_tokens=PROMPT_TOKENS, max_tokens=settings.generation.max_tokens_cap,
        need_tokens=need, fits_seqs=fits, data_parallel=dp, tensor_parallel=tp, shape=shape,
        dtype_bytes=dtype_bytes, fp8=fp8, api_server_count=api_servers, stream_interval=interval, cpu_count=cpus,
        frontend_set=tuple(k for k in ("api_server_count", "stream_interval") if getattr(eng, k)),
        notes=tuple(notes),
    )
