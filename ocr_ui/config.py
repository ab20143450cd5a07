"""Every setting of the workbench, declared once with its help text and bounds.

Precedence: environment > file > default. The environment is passed in (``load_config(path, environ)``)
so tests never touch ``os.environ``; this is the only module that reads it. An environment variable
``OCR_UI__SECTION__KEY`` overrides ``section.key`` (values are parsed as YAML scalars/lists).
Unknown keys fail at startup with a message that names the key.

``python -m ocr_ui.config vllm-args [--auto] [--explain]`` prints the engine flags rendered from config,
``python -m ocr_ui.config show`` the effective settings (secrets masked),
``python -m ocr_ui.config docs`` the Markdown table of every key for the README.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from ocr_ui.errors import ConfigError

ENV_PREFIX = "OCR_UI__"
CONFIG_ENV = "OCR_UI_CONFIG"
DEFAULT_CONFIG_PATH = Path(__file__).resolve().parent.parent / "config.yaml"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AppSettings(_Section):
    host: str = Field("127.0.0.1", description="Address the web app binds to. 0.0.0.0 exposes it to the network: set only on purpose.")
    port: int = Field(7860, ge=1, le=65535, description="Port of the web app (UI, /api/ocr, /healthz, /metrics).")
    share: bool = Field(False, description="Ask Gradio for a public share link (needs internet; off by default).")
    root_path: str = Field("", description="URL prefix when the app runs behind a reverse proxy, e.g. /ocr.")
    log_dir: str = Field("logs", description="Folder for the app's, the engine's and the failure-record log files.")
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="Log level of the app.")
    login_user: str | None = Field(None, description="User name for the optional UI login; set together with login_password.")
    login_password: SecretStr | None = Field(None, description="Password for the optional UI login (use the environment, not the file).")
    api_tokens: list[SecretStr] = Field(default_factory=list, description="Bearer tokens accepted by POST /api/ocr; empty means the API is open (on 127.0.0.1 only by default).")
    rate_limit_per_minute: int = Field(0, ge=0, le=100000, description="Requests per minute per client on /api/ocr and the UI; 0 turns the limit off.")
    queue_concurrency: int = Field(16, ge=1, le=4096, description="Gradio events that run at once (concurrency_limit); beyond that they wait in the queue.")
    queue_max_size: int = Field(64, ge=1, le=100000, description="Gradio events that may wait; one more gets the clean 'busy, try again' answer.")
    max_upload_mb: float = Field(50.0, gt=0, le=2048, description="Largest upload accepted, checked before the file is read whole.")
    ui_language: Literal["auto", "en", "zh"] = Field("auto", description="Interface language; auto follows the browser.")
    keep_failed_inputs: bool = Field(False, description="Keep a copy of inputs that failed (for analysis); by default only their hash is logged.")
    run_history: bool = Field(False, description="Gradio's server-side run history; off because documents may be private.")
    stream_flush_s: float = Field(0.05, ge=0, le=2, description="While text streams, /api/ocr sends a line and the UI redraws at most once per this many seconds per request; the first text, status changes and the end go out at once. 0 sends every chunk.")


class ModelSettings(_Section):
    profile: Literal["hunyuanocr-1.5", "hunyuanocr-1.0"] = Field("hunyuanocr-1.5", description="Prompt set, sampling defaults and output format of the served model.")
    path: str = Field("tencent/HunyuanOCR", description="Hub id or local checkpoint folder the engine loads.")
    revision: str = Field("", description="Hub revision; empty takes the profile's (1.0 pins f6af82ee..., 1.5 the repo root).")
    served_name: str = Field("tencent/HunyuanOCR", description="Model name the engine serves and the app asks for (--served-model-name).")
    load_format: Literal["auto", "dummy"] = Field("auto", description="'dummy' loads random weights of the real shape (benchmarks without weights).")


class EngineSettings(_Section):
    base_url: str = Field("http://127.0.0.1:8000/v1", description="OpenAI-compatible URL of the engine, as the app reaches it.")
    host: str = Field("127.0.0.1", description="Address the launched engine binds to; keep it on loopback.")
    port: int = Field(8000, ge=1, le=65535, description="Port of the launched engine.")
    api_key: SecretStr | None = Field(None, description="Key the engine demands (--api-key) and the app sends; unset means none.")
    device: Literal["auto", "cuda", "cpu"] = Field("auto", description="auto picks cuda when nvidia-smi sees a GPU, else the CPU build of vLLM.")
    max_num_seqs: int = Field(16, ge=1, le=4096, description="Requests the engine runs at once; the rest wait in its queue (memory-bound on small cards).")
    gpu_memory_utilization: float = Field(0.85, gt=0.05, le=0.98, description="Share of GPU memory vLLM may take (weights + KV cache); leaves room for other processes.")
    max_model_len: int = Field(8192, ge=512, le=131072, description="Context per request: image tokens + prompt + max_tokens must fit.")
    max_num_batched_tokens: int = Field(8192, ge=256, le=1048576, description="Tokens per scheduler step; bounds activation memory of prefill.")
    enable_chunked_prefill: bool = Field(True, description="Split long prefills so decodes keep flowing (lower tail latency).")
    enable_prefix_caching: bool = Field(False, description="OCR prompts share almost nothing; off saves hashing and memory.")
    mm_processor_cache_gb: float = Field(0.0, ge=0, le=64, description="vLLM's image-processor cache; 0 because pages are not reused.")
    stream_interval: int = Field(0, ge=0, le=64, description="Tokens vLLM gathers into one streamed chunk (--stream-interval); the first token always goes at once. 0: 1 (token by token), or 8 where --auto plans 64+ running requests per replica; a number set here is used as given, also with --auto.")
    api_server_count: int = Field(0, ge=0, le=64, description="vLLM API-server processes in front of one engine (--api-server-count, GPU only): they decode images and stream answers, the first ceiling on a big GPU. 0: 1, or min(4, cores // 8) where --auto plans 64+ running requests per replica; a number set here is used as given, also with --auto.")
    limit_images_per_prompt: int = Field(1, ge=1, le=8, description="Images per request the engine accepts; the app sends one page at a time.")
    data_parallel_size: int = Field(1, ge=1, le=64, description="Engine replicas over GPUs (vLLM --data-parallel-size).")
    tensor_parallel_size: int = Field(1, ge=1, le=8, description="GPUs one replica is split over (vLLM --tensor-parallel-size).")
    quantization: Literal["none", "fp8"] = Field("none", description="Weight quantization; fp8 halves weight memory on Hopper GPUs.")
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = Field("auto", description="Weights' dtype; the CPU build needs float32.")
    enforce_eager: bool = Field(False, description="Skip CUDA graphs / torch.compile: faster start, slower decode.")
    cpu_kv_cache_gb: float = Field(2.0, gt=0, le=512, description="KV-cache size for the CPU build (VLLM_CPU_KVCACHE_SPACE).")
    startup_timeout_s: float = Field(900.0, gt=0, le=7200, description="How long the launcher waits for the engine's /health.")
    extra_args: list[str] = Field(default_factory=list, description="More vLLM flags, passed as they are (checked against removed flags).")
    venv_dir: str = Field("", description="The engine's own virtual environment; empty means ~/.cache/ocr-workbench/engine-<device>-<vLLM version> (shared by every clone).")
    urls: list[str] = Field(default_factory=list, description="Engine URLs (one per host) behind the nginx router that python -m ocr_ui.router_config renders; the app talks to base_url.")
    router_listen: str = Field("127.0.0.1:8080", pattern=r"^(\[[0-9A-Fa-f:]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}$", description="host:port the nginx router listens on; engine.base_url then points at http://<it>/v1.")


class ClientSettings(_Section):
    max_in_flight: int = Field(0, ge=0, le=4096, description="Engine requests the app keeps open at once per engine replica (times engine.data_parallel_size); more wait in the app. 0: engine.max_num_seqs and half again, so the engine always has the next pages received and decoded when a request finishes.")
    acquire_timeout_s: float = Field(120.0, gt=0, le=3600, description="How long a page waits for an in-flight slot before the 'busy' answer.")
    connect_timeout_s: float = Field(5.0, gt=0, le=300, description="Time to open a connection to the engine.")
    idle_timeout_s: float = Field(120.0, gt=0, le=3600, description="Longest silence between two streamed chunks (covers the engine's queue and prefill).")
    total_timeout_s: float = Field(600.0, gt=0, le=86400, description="Longest time for one page from request to last token.")
    max_retries: int = Field(1, ge=0, le=10, description="Retries of a request that failed before its stream began.")


class ImageSettings(_Section):
    max_side: int = Field(2048, ge=64, le=8192, description="Longest side of a page sent to the engine, in pixels, whatever the token budget allows.")
    min_side: int = Field(8, ge=1, le=512, description="Images with a shorter side are refused as too small to read.")
    max_decoded_pixels: int = Field(150_000_000, ge=1_000_000, le=178_000_000, description="Pixel count above which an image is refused before decoding (decompression bombs); Pillow refuses above ~179 million itself.")
    max_aspect_ratio: float = Field(150.0, ge=2, le=199, description="Longest/shortest side above which a page is refused (the model's limit is 200).")
    encode_format: Literal["png", "jpeg"] = Field("jpeg", description="How pages travel to the engine; JPEG is smaller, PNG lossless.")
    jpeg_quality: int = Field(92, ge=50, le=100, description="JPEG quality when encode_format is jpeg.")
    pdf_dpi: int = Field(150, ge=36, le=600, description="Resolution PDF pages are rendered at before fitting the token budget.")
    max_pages: int = Field(200, ge=1, le=10000, description="Pages of one PDF processed per request; more need a page range.")
    max_pdf_page_inches: float = Field(200.0, ge=10, le=2000, description="A PDF page larger than this (either side) is refused.")


class GenerationSettings(_Section):
    max_tokens_cap: int = Field(4096, ge=16, le=131072, description="Upper bound for max_tokens of any preset or request.")
    repeat_check_after_chars: int = Field(2000, ge=100, le=1000000, description="The repetition guard starts watching after this many characters.")
    repeat_check_every_chars: int = Field(500, ge=10, le=100000, description="...and looks again every this many new characters.")
    repeat_window_chars: int = Field(8000, ge=100, le=1000000, description="Tail length the guard inspects.")
    repeat_min_repeats: int = Field(8, ge=2, le=1000, description="A tail unit repeated this many times stops the stream.")
    repeat_max_unit_chars: int = Field(256, ge=1, le=10000, description="Longest repeated unit the guard looks for.")
    max_prompt_chars: int = Field(4000, ge=100, le=100000, description="Longest prompt or question a user may send.")
    max_fields: int = Field(64, ge=1, le=1000, description="Most field names in one 'extract fields' request.")
    ignore_eos: bool = Field(False, description="Benchmarks only: generate max_tokens every time (random dummy weights never stop); never in production.")


class AdmissionSettings(_Section):
    enabled: bool = Field(True, description="Read the engine's load from its /metrics and hold or refuse work when it is saturated.")
    poll_interval_s: float = Field(1.0, gt=0, le=60, description="How often the engine's /metrics is sampled (not per request).")
    max_waiting: int = Field(64, ge=0, le=100000, description="Engine queue length (vllm:num_requests_waiting) above which new pages are held.")
    max_kv_usage: float = Field(0.95, gt=0, le=1, description="KV-cache usage (0-1) above which new pages are held.")
    hold_timeout_s: float = Field(30.0, ge=0, le=3600, description="How long a held page waits for the engine to drain before the 'busy' answer.")
    small_first: bool = Field(True, description="Pages with few image tokens (phone photos) may go ahead of big scans when slots are scarce.")
    small_image_tokens: int = Field(1200, ge=1, le=100000, description="A page at or below this many image tokens counts as small.")
    degrade_under_pressure: bool = Field(True, description="When the engine is saturated, send smaller images and lower max_tokens, and say so.")
    degrade_max_side: int = Field(1280, ge=64, le=8192, description="Longest side used while degraded.")
    degrade_max_tokens: int = Field(2048, ge=16, le=131072, description="max_tokens cap used while degraded.")
    breaker_failures: int = Field(5, ge=1, le=1000, description="Consecutive engine failures that open the circuit breaker.")
    breaker_reset_s: float = Field(15.0, gt=0, le=3600, description="How long the breaker stays open before a probe request is let through.")
    breaker_latency_s: float = Field(0.0, ge=0, le=3600, description="Median time to first token above which the breaker opens; 0 turns it off.")
    breaker_gpu_temp_c: float = Field(0.0, ge=0, le=120, description="GPU temperature above which the breaker opens; 0 turns it off.")


class MetricsSettings(_Section):
    enabled: bool = Field(True, description="Serve Prometheus metrics at GET /metrics.")
    nvml: bool = Field(True, description="Export GPU memory, utilisation and temperature when an NVIDIA GPU is visible.")


class Settings(_Section):
    app: AppSettings = Field(default_factory=lambda: AppSettings(), description="The web app.")
    model: ModelSettings = Field(default_factory=lambda: ModelSettings(), description="Which model is served.")
    engine: EngineSettings = Field(default_factory=lambda: EngineSettings(), description="The vLLM engine and its memory-safe flags.")
    client: ClientSettings = Field(default_factory=lambda: ClientSettings(), description="How the app talks to the engine.")
    images: ImageSettings = Field(default_factory=lambda: ImageSettings(), description="Uploads and page images.")
    generation: GenerationSettings = Field(default_factory=lambda: GenerationSettings(), description="Token limits and the repetition guard.")
    admission: AdmissionSettings = Field(default_factory=lambda: AdmissionSettings(), description="Admission control and the circuit breaker.")
    metrics: MetricsSettings = Field(default_factory=lambda: MetricsSettings(), description="Prometheus metrics.")


IN_FLIGHT_HEADROOM = 1.5  # client.max_in_flight 0 means engine.max_num_seqs x this


def in_flight_limit(settings: Settings, max_num_seqs: int | None = None) -> int:
    """Engine requests the app keeps open at once: ``client.max_in_flight``, or derived from the engine.

    A little more than the engine runs: with exactly ``max_num_seqs`` open, each finished request left
    a seat empty while the next page crossed to the engine and its image was decoded there.
    The limit is per engine replica: data parallelism multiplies what the engine can run at once
    (tensor parallelism splits one replica, so it adds capacity only through max_num_seqs).
    """
    seqs = max_num_seqs or settings.engine.max_num_seqs
    per_replica = settings.client.max_in_flight or math.ceil(seqs * IN_FLIGHT_HEADROOM)
    return per_replica * settings.engine.data_parallel_size


def _env_overrides(environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    sections = Settings.model_fields
    out: dict[str, dict[str, Any]] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        parts = name[len(ENV_PREFIX):].lower().split("__")
        if len(parts) != 2 or parts[0] not in sections:
            raise ConfigError(f"unknown setting in environment variable {name}")
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"environment variable {name} is not a valid value") from exc
        out.setdefault(parts[0], {})[parts[1]] = value
    return out


def _merge(base: dict[str, Any], over: dict[str, dict[str, Any]]) -> dict[str, Any]:
    merged = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    for section, values in over.items():
        current = merged.get(section)
        merged[section] = {**(current if isinstance(current, dict) else {}), **values}
    return merged


def _describe(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            lines.append(f"unknown setting '{where}'")
        else:
            lines.append(f"setting '{where}': {err['msg']}")
    return "; ".join(lines)


def load_config(path: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Read config.yaml (or ``path``), apply ``OCR_UI__*`` overrides from ``environ``, validate."""
    environ = {} if environ is None else environ
    if path is None:
        path = environ.get(CONFIG_ENV) or DEFAULT_CONFIG_PATH
    path = Path(path)
    data: dict[str, Any] = {}
    if path.exists():
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path.name} is not valid YAML: {exc}") from exc
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path.name} must be a mapping of sections")
        data = loaded or {}
    elif path != DEFAULT_CONFIG_PATH:
        raise ConfigError(f"config file not found: {path}")
    try:
        settings = Settings.model_validate(_merge(data, _env_overrides(environ)))
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from exc
    if (settings.app.login_user is None) != (settings.app.login_password is None):
        raise ConfigError("set both app.login_user and app.login_password, or neither")
    return settings


def load_from_process(path: str | Path | None = None) -> Settings:
    """``load_config`` with this process's environment (for entry points, never for tests)."""
    return load_config(path, dict(os.environ))


def process_environ() -> dict[str, str]:
    """A copy of this process's environment, for entry points that start child processes."""
    return dict(os.environ)


def iter_keys() -> list[tuple[str, str, str, str]]:
    """Every key as (dotted name, default, bounds, description), for docs and the documentation test."""
    rows = []
    for section, sfield in Settings.model_fields.items():
        model = sfield.annotation
        assert isinstance(model, type) and issubclass(model, BaseModel)
        for key, field in model.model_fields.items():
            default = field.get_default(call_default_factory=True)
            bounds = ", ".join(
                f"{name} {getattr(m, name)}" for m in field.metadata for name in ("ge", "gt", "le", "lt")
                if getattr(m, name, None) is not None
            )
            rows.append((f"{section}.{key}", repr(default), bounds, field.description or ""))
    return rows


def masked_dump(settings: Settings) -> dict[str, Any]:
    """Settings as plain data with secrets shown as '***'."""
    return settings.model_dump(mode="json")  # pydantic renders SecretStr as '**********'


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; see the module docstring."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m ocr_ui.config")
    parser.add_argument("--config", default=None, help="config file (default: $OCR_UI_CONFIG or config.yaml)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    va = sub.add_parser("vllm-args", help="print the vLLM server flags rendered from config")
    va.add_argument("--auto", action="store_true", help="size max-num-seqs and friends from the GPU's memory")
    va.add_argument("--explain", action="store_true", help="print the sizing arithmetic (to stderr)")
    va.add_argument("--gpu-memory-gb", type=float, default=None, help="assume this much GPU memory instead of asking nvidia-smi")
    va.add_argument("--cpus", type=int, default=None, help="with --auto: plan API servers for this many CPU cores (default: this machine's)")
    va.add_argument("--shell", action="store_true", help="one shell-quoted line instead of one flag per line")
    sub.add_parser("show", help="print the effective settings as JSON (secrets masked)")
    sub.add_parser("docs", help="print the Markdown table of every setting")
    args = parser.parse_args(argv)
    try:
        settings = load_config(args.config, os.environ)
        if args.cmd == "show":
            print(json.dumps(masked_dump(settings), indent=2, ensure_ascii=False))
        elif args.cmd == "docs":
            print("| key | default | bounds | what it does |\n|---|---|---|---|")
            for name, default, bounds, desc in iter_keys():
                print(f"| `{name}` | `{default}` | {bounds} | {desc} |")
        else:
            from ocr_ui import engine_args

            flags = engine_args.render(settings, auto=args.auto, gpu_memory_gb=args.gpu_memory_gb, cpu_count=args.cpus,
                                       explain=sys.stderr if args.explain else None)
            if args.shell:
                import shlex

                print(shlex.join(flags))
            else:
                print("\n".join(flags))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
