"""A short soak: ``python app.py`` in its own process under mixed traffic and injected engine faults.

Every failure must be one the soak injected (or a hostile upload's own code), every 5xx must be an
engine fault mapped to its status, and the app must still answer /healthz at the end. The long run and
its memory figures are in docs/benchmarks.md ("Soak"); this one only proves the tool and the invariants.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from ocr_ui.soak import CONSEQUENCES, FAULT_CODES, _parser, soak
from tests.support.corpus import hostile_cases

ENGINE_STATUSES = {"502": "engine_error", "503": "engine_busy", "504": "engine_timeout"}


@pytest.mark.timeout(240)
def test_a_short_soak_sees_only_injected_failures_and_leaves_the_app_answering(tmp_path: Path) -> None:
    args = _parser().parse_args(["--duration", "20", "--concurrency", "4", "--fault-rate", "0.2",
                                 "--hostile-rate", "0.15", "--cancel-rate", "0.15", "--out", str(tmp_path)])
    report = asyncio.run(soak(args))
    print(json.dumps({k: v for k, v in report.items() if k != "unexpected"}, ensure_ascii=False))

    assert report["unexpected_count"] == 0, report["unexpected"]
    assert report["healthz_at_end"] is True
    kinds = report["requests_by_kind"]
    assert kinds.get("normal", 0) > 0 and kinds.get("hostile", 0) > 0 and kinds.get("cancelled", 0) > 0
    assert report["pages_ok"] > 0 and sum(report["faults_injected"].values()) > 0
    assert report["engine"]["client_disconnects"] > 0  # abandoned streams and hangs closed the engine request

    allowed = set(FAULT_CODES.values()) | CONSEQUENCES | {c.expected.code for c in hostile_cases()}
    assert set(report["failures_by_code"]) <= allowed
    server_errors = {status for status in report["http_status"] if status.startswith("5")}
    assert server_errors <= set(ENGINE_STATUSES), report["http_status"]  # no 500: nothing escaped unmapped

    records = [json.loads(line) for line in (tmp_path / "app-logs" / "failures.jsonl").read_text().splitlines()]
    assert records and {r["code"] for r in records} <= allowed
    assert not any(re.search(r"/tmp|/work|/root|/home|site-packages|Traceback", r["message"]) for r in records)
    assert json.loads((tmp_path / "report.json").read_text())["requests"] == report["requests"]
