#!/usr/bin/env bash
# Bring up the OCR workbench: the vLLM engine (GPU if nvidia-smi sees one, else vLLM's CPU build),
# then the web app on http://127.0.0.1:7860 pointed at it. Ctrl-C stops both.
#
# Usage: ./launch_vllm.sh [--model PATH_OR_ID] [--external-vllm URL] [--device cpu|cuda|auto] [--config PATH]
#   --model /path/to/checkpoint   a local HunyuanOCR checkpoint (needed where the hub is unreachable)
#   --external-vllm URL           an engine that already runs elsewhere; no engine is started here
#
# The engine's flags are rendered from config.yaml (`python -m ocr_ui.config vllm-args` prints
# them); config.yaml says why each memory flag has its value. In short:
#   --max-num-seqs              requests running at once: caps KV cache and activation peaks
#   --gpu-memory-utilization    share of GPU memory vLLM takes; the rest stays for the CUDA context
#   --max-model-len             one page's image tokens + prompt + max_tokens must fit, no more
#   --max-num-batched-tokens    tokens per scheduler step: caps prefill activation memory
#   --no-enable-prefix-caching  OCR prompts share nothing; saves hashing and cache memory
#   --mm-processor-cache-gb 0   pages are never reused; the cache would be duplicated per process
#   --limit-mm-per-prompt       one image per request, as the app sends
#   CPU build: --dtype float32 (bf16 crashes some CPUs), --enforce-eager (no 50 s compile), and
#   VLLM_CPU_KVCACHE_SPACE from engine.cpu_kv_cache_gb.
# Overrides: OCR_UI__SECTION__KEY environment variables, e.g. OCR_UI__ENGINE__MAX_NUM_SEQS=8.
# Logs: logs/engine.log and logs/app.log (app.log_dir). Only processes started here are stopped.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x .venv/bin/python ]; then
  echo "launch_vllm: creating the app environment in .venv (once)"
  python3 -m venv .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
fi
exec .venv/bin/python -m ocr_ui.launcher "$@"
