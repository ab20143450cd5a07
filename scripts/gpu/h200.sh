#!/usr/bin/env bash
# GPU benchmark harness for the lent H200 machine (no network, vLLM 0.26 carried as a payload).
# Each phase is one device command; engines are started with setsid so they outlive a command and
# keep loading while the next one is sent. Start engines that share a GPU one after another: started
# together, vLLM's memory profiling sees the others' allocations (one died, two got less KV cache).
# Results land under $OUT (copied back) and /tmp/gpu.
#
#   bash scripts/gpu/h200.sh setup                 unpack payload + app wheels, build the shape checkpoint
#   bash scripts/gpu/h200.sh start NAME GPUS PORT [KEY=VALUE ...]   start an engine (config overrides)
#   bash scripts/gpu/h200.sh wait NAME...           wait for engines' /health
#   bash scripts/gpu/h200.sh app NAME PORT ENGINE_PORT   start the app in front of an engine
#   bash scripts/gpu/h200.sh bench LABEL ARGS...    python -m ocr_ui.bench ARGS --out /tmp/gpu/LABEL
#   bash scripts/gpu/h200.sh stop NAME...           stop engines/apps by PID
#   bash scripts/gpu/h200.sh collect                copy logs, results and GPU samples to $OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
W=/tmp/gpu
mkdir -p "$W/logs" "$W/pids"
export PYTHONPATH=/tmp/site2:/tmp/site PYTHONUNBUFFERED=1
export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_USE_V2_MODEL_RUNNER=0 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 GRADIO_ANALYTICS_ENABLED=False
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
CKPT=${CKPT:-$W/ckpt}
PY=${PY:-python3}                      # runs the app, the bench and config rendering
ENGINE_PY=${ENGINE_PY:-$PY}            # runs vLLM (the same Python on the GPU machine)
VLLM_ENTRY=${VLLM_ENTRY:-vllm.entrypoints.cli.main serve}

say() { echo "[$(date +%H:%M:%S)] $*"; }

setup() {
  bash .gpu-payload/device_unpack.sh unpack || return 1
  if [ ! -d /tmp/site2/gradio ]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site2 .whl/*.whl || return 1
  fi
  $PY -m ocr_ui.shape_checkpoint "$CKPT"
  # The page every run sends: the synthetic 1024x768 phone photo as JPEG (the app forwards it as is).
  $PY -c "from ocr_ui.synthetic_pages import page_bytes; open('$W/small.jpg', 'wb').write(page_bytes('small', fmt='jpeg'))"
  $PY -c "import gradio, vllm, openai; print('gradio', gradio.__version__, 'vllm', vllm.__version__, 'openai', openai.__version__)"
  nvidia-smi --query-gpu=index,name,memory.total --format=csv
  # GPU memory samples every second for the whole session: peak memory per phase is read from here.
  if [ ! -f "$W/pids/smi" ]; then
    setsid nvidia-smi --query-gpu=timestamp,index,memory.used,utilization.gpu,temperature.gpu --format=csv,noheader -l 1 \
      > "$W/gpu_samples.csv" 2>/dev/null < /dev/null & echo $! > "$W/pids/smi"
  fi
}

start() {  # NAME GPUS PORT [OCR_UI__ overrides as SECTION__KEY=VALUE]
  local name=$1 gpus=$2 port=$3; shift 3
  local envs=(OCR_UI__MODEL__PATH="$CKPT" OCR_UI__MODEL__LOAD_FORMAT="${LOAD_FORMAT:-dummy}"
              OCR_UI__ENGINE__PORT="$port" OCR_UI__ENGINE__DEVICE="${DEVICE:-cuda}")
  for kv in "$@"; do envs+=("OCR_UI__$kv"); done
  local flags
  flags=$(env "${envs[@]}" $PY -m ocr_ui.config vllm-args --shell ${AUTO:+--auto --explain --gpu-memory-gb ${GPU_GB:-140.4}} \
          2> "$W/logs/$name.sizing.txt") || { cat "$W/logs/$name.sizing.txt"; return 1; }
  echo "$flags" > "$W/logs/$name.flags"
  say "start $name on GPU $gpus: $flags"
  # `vllm serve` (not the api_server module): it honours --api-server-count and data parallelism.
  local argv; eval "argv=($flags ${EXTRA:-})"
  # shellcheck disable=SC2086  # ENGINE_ENV and VLLM_ENTRY are word lists on purpose
  setsid env CUDA_VISIBLE_DEVICES="$gpus" ${ENGINE_ENV:-} "$ENGINE_PY" -m $VLLM_ENTRY "${argv[@]}" \
    > "$W/logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$W/pids/$name"
  echo "$port" > "$W/pids/$name.port"
}

wait_healthy() {
  local name deadline=$((SECONDS + ${WAIT_S:-400}))
  for name in "$@"; do
    local port; port=$(cat "$W/pids/$name.port")
    until curl -sf "http://127.0.0.1:$port/health" > /dev/null; do
      if ! kill -0 "$(cat "$W/pids/$name")" 2>/dev/null; then say "$name died"; tail -40 "$W/logs/$name.log"; return 1; fi
      if [ $SECONDS -gt $deadline ]; then say "$name not healthy in time"; tail -20 "$W/logs/$name.log"; return 1; fi
      sleep 2
    done
    say "$name healthy; $(grep -m1 -E 'KV cache size|GPU KV cache' "$W/logs/$name.log" | sed 's/.*] //')"
  done
}

app() {  # NAME PORT ENGINE_PORT [overrides]
  local name=$1 port=$2 eport=$3; shift 3
  local envs=(OCR_UI__APP__PORT="$port" OCR_UI__ENGINE__BASE_URL="http://127.0.0.1:$eport/v1"
              OCR_UI__APP__LOG_DIR="$W/logs/$name")
  for kv in "$@"; do envs+=("OCR_UI__$kv"); done
  setsid env "${envs[@]}" $PY app.py > "$W/logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$W/pids/$name"
  for _ in $(seq 1 120); do curl -sf "http://127.0.0.1:$port/healthz" > /dev/null && { say "$name up"; return 0; }; sleep 1; done
  say "$name did not come up"; tail -30 "$W/logs/$name.log"; return 1
}

snapshot() {  # DIR WHEN URL: every process's CPU seconds so far and the target's /metrics page
  ps -eo pid,ppid,times,args --no-headers | awk '$3 > 0' | cut -c1-200 > "$1/cpu-$2.txt"
  curl -s --max-time 5 "${3%/v1}/metrics" > "$1/metrics-$2.txt"
  local p  # per-thread CPU of the engine cores: which of their threads is busy
  for p in $(pgrep -f EngineCore); do ps -L -o pid,tid,time,comm --no-headers -p "$p"; done > "$1/threads-$2.txt"
}

bench() {  # LABEL ARGS...
  local label=$1 url="" a prev=""; shift
  for a in "$@"; do [ "$prev" = "--url" ] && url=$a; prev=$a; done
  say "bench $label: $*"
  mkdir -p "$W/$label"
  { nvidia-smi --query-compute-apps=pid,used_memory --format=csv; ps -eo pid,pgid,args | grep -E "vllm|EngineCore" | grep -v grep | cut -c1-160; } \
    > "$W/procs-$label.txt" 2>/dev/null
  # Before/after snapshots split the run's time by process (CPU seconds) and by engine stage (vLLM's
  # queue / prefill / decode histograms), to tell an API-server ceiling from an engine-core one.
  snapshot "$W/$label" before "$url"
  $PY -m ocr_ui.bench --quiet --out "$W/$label" "$@" 2>&1 | tail -12
  snapshot "$W/$label" after "$url"
}

stop() {
  local name
  for name in "$@"; do
    [ -f "$W/pids/$name" ] || continue
    kill -TERM -- "-$(cat "$W/pids/$name")" 2>/dev/null || kill -TERM "$(cat "$W/pids/$name")" 2>/dev/null
  done
  sleep 8
  for name in "$@"; do
    [ -f "$W/pids/$name" ] || continue
    kill -KILL -- "-$(cat "$W/pids/$name")" 2>/dev/null; rm -f "$W/pids/$name"
  done
}

collect() {
  [ -n "${OUT:-}" ] || return 0
  # At most 8 files come back: one tarball of everything plus the summaries as plain files.
  tar -czf "$OUT/gpu-run.tgz" -C "$W" --exclude=ckpt . 2>/dev/null
  for f in "$W"/*/summary.json; do [ -f "$f" ] && echo "== $f" && cat "$f"; done > "$OUT/summaries.txt"
  ls -la "$OUT"
}

cmd=${1:?phase}; shift
case "$cmd" in
  setup) setup ;;
  start) start "$@" ;;
  wait) wait_healthy "$@" ;;
  app) app "$@" ;;
  bench) bench "$@" ;;
  stop) stop "$@" ;;
  collect) collect ;;
  *) echo "unknown phase $cmd" >&2; exit 2 ;;
esac
