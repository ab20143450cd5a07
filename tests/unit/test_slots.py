"""The priority semaphore: limit, order of service, busy answer, and clean-up after cancellation."""

from __future__ import annotations

import asyncio

import pytest

from ocr_ui.errors import ConfigError, EngineBusy
from ocr_ui.slots import Slots

pytestmark = pytest.mark.anyio


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_no_more_than_limit_holders_at_once() -> None:
    slots = Slots(2)
    peak = 0

    async def work() -> None:
        nonlocal peak
        async with slots.hold(timeout=5):
            peak = max(peak, slots.in_use)
            await asyncio.sleep(0.001)

    await asyncio.gather(*(work() for _ in range(10)))
    assert peak == 2
    assert slots.in_use == 0 and slots.waiting == 0


async def test_lower_priority_value_goes_first_and_fifo_within_a_priority() -> None:
    slots = Slots(1)
    order: list[str] = []
    gate = asyncio.Event()

    async def holder() -> None:
        async with slots.hold(timeout=5):
            await gate.wait()

    async def waiter(name: str, priority: int) -> None:
        async with slots.hold(priority, timeout=5):
            order.append(name)

    first = asyncio.create_task(holder())
    await _settle()
    tasks = []
    for name, priority in [("big-1", 5), ("big-2", 5), ("small", 0), ("big-3", 5)]:
        tasks.append(asyncio.create_task(waiter(name, priority)))
        await _settle()
    assert slots.waiting == 4
    gate.set()
    await asyncio.gather(first, *tasks)
    assert order == ["small", "big-1", "big-2", "big-3"]


async def test_a_release_hands_the_slot_straight_to_the_next_waiter() -> None:
    slots = Slots(1)
    got: list[str] = []

    async def waiter() -> None:
        async with slots.hold(timeout=5):
            got.append("queued")

    async with slots.hold(timeout=5):
        queued = asyncio.create_task(waiter())
        await _settle()
        assert slots.waiting == 1
    # No await since the release: the waiter has not run yet, but the slot is already its own, so a
    # newcomer arriving now finds nothing free and cannot overtake it.
    assert slots.in_use == 1 and slots.waiting == 0
    await queued
    assert got == ["queued"] and slots.in_use == 0


async def test_waiting_longer_than_the_timeout_raises_engine_busy() -> None:
    slots = Slots(1)
    async with slots.hold(timeout=5):
        with pytest.raises(EngineBusy) as info:
            async with slots.hold(timeout=0.01):
                pass
    assert "busy" in str(info.value)
    assert slots.in_use == 0 and slots.waiting == 0


async def test_a_cancelled_waiter_leaves_the_queue_and_the_slot_goes_on() -> None:
    slots = Slots(1)
    gate = asyncio.Event()
    got: list[str] = []

    async def holder() -> None:
        async with slots.hold(timeout=5):
            await gate.wait()

    async def waiter(name: str) -> None:
        async with slots.hold(timeout=5):
            got.append(name)

    first = asyncio.create_task(holder())
    await _settle()
    doomed = asyncio.create_task(waiter("doomed"))
    survivor = asyncio.create_task(waiter("survivor"))
    await _settle()
    doomed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await doomed
    assert slots.waiting == 1
    gate.set()
    await asyncio.gather(first, survivor)
    assert got == ["survivor"]
    assert slots.in_use == 0


async def test_an_error_inside_the_block_still_releases_the_slot() -> None:
    slots = Slots(1)
    with pytest.raises(RuntimeError):
        async with slots.hold(timeout=5):
            raise RuntimeError("page failed")
    assert slots.in_use == 0
    async with slots.hold(timeout=0.01):
        assert slots.in_use == 1


def test_a_limit_below_one_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        Slots(0)
