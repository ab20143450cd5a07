"""Regenerate the configuration table in README.md from ocr_ui/config.py (run after adding a key)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
readme = ROOT / "README.md"
table = subprocess.run([sys.executable, "-m", "ocr_ui.config", "docs"], cwd=ROOT, check=True,
                       capture_output=True, text=True).stdout
text = readme.read_text(encoding="utf-8")
new = re.sub(r"(<!-- config-table:start[^\n]*-->\n).*?(<!-- config-table:end -->)",
             lambda m: m.group(1) + table + m.group(2), text, flags=re.S)
readme.write_text(new, encoding="utf-8")
print("README configuration table:", table.count("\n") - 2, "keys")
