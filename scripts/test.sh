#!/usr/bin/env bash
# The one test command: installs everything the tests need (app venv, the CPU engine, Chromium) and
# runs the whole default suite. Safe to run again: existing environments are reused.
# Usage: ./scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
t0=$(date +%s)
if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
.venv/bin/pip install -q -r requirements-dev.txt 2>&1 | grep -v '^WARNING: Location' || true
t1=$(date +%s)
echo "== app environment ready in $((t1 - t0)) s"
.venv/bin/ruff check ocr_ui tests app.py
.venv/bin/python -m pytest "$@"
