"""How ``--procs`` shares a load-test level between worker processes, and how their records merge."""

from __future__ import annotations

import pytest

from ocr_ui.bench_procs import _merge, shares, split
from ocr_ui.bench_report import Record


def test_a_total_is_split_as_evenly_as_possible_larger_shares_first() -> None:
    assert split(64, 3) == [22, 21, 21]
    assert split(256, 4) == [64, 64, 64, 64]
    assert split(7, 2) == [4, 3]
    assert split(2, 2) == [1, 1]


@pytest.mark.parametrize(("level", "procs", "requests", "duration", "expected"), [
    (64, 3, 256, None, ([22, 21, 21], [86, 85, 85])),
    (2, 8, 10, None, ([1, 1], [5, 5])),  # never more workers than requests in flight
    (16, 4, 3, None, ([6, 5, 5], [1, 1, 1])),  # nor than requests
    (16, 2, None, None, ([8, 8], [32, 32])),  # the default count (4 x level) is split too
    (5, 2, None, 30.0, ([3, 2], None)),  # a --duration applies to each worker as given
])
def test_a_level_is_shared_by_concurrency_and_request_count(level: int, procs: int, requests: int | None,
                                                             duration: float | None, expected: tuple) -> None:
    assert shares(level, procs, requests, duration) == expected


def test_merged_records_share_one_clock_and_are_numbered_in_start_order() -> None:
    first = [Record("engine", 2, i, "small", 0.1 * i) for i in range(2)]
    second = [Record("engine", 1, 0, "a4", 0.05)]
    records, wall = _merge({0: (first, 100.0, 101.0), 1: (second, 100.5, 102.0)}, 3)
    assert wall == 2.0  # earliest start to last end
    assert [(r.worker, r.started_s) for r in records] == [(0, 0.0), (0, pytest.approx(0.1)), (1, 0.55)]
    assert [r.index for r in records] == [0, 1, 2] and {r.concurrency for r in records} == {3}
