"""A priority semaphore bounding the engine requests this process keeps open.

vLLM's own waiting queue is unbounded (0.26), so the app decides how many pages are at the engine at
once. Waiters are served by priority (lower value first: a phone photo may pass a 200-page scan) and
first come, first served within one priority. A slot is handed straight to the next waiter on release,
so a newcomer can never overtake someone already queued.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from ocr_ui.errors import ConfigError, EngineBusy


class Slots:
    """``async with slots.hold(priority, timeout=...)``: at most ``limit`` holders at a time."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ConfigError("client.max_in_flight must be at least 1")
        self.limit = limit
        self.in_use = 0
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    @property
    def waiting(self) -> int:
        """Waiters still queued (cancelled ones are dropped lazily, so count only live ones)."""
        return sum(1 for _, _, fut in self._waiters if not fut.done())

    @asynccontextmanager
    async def hold(self, priority: int = 0, *, timeout: float) -> AsyncIterator[None]:  # noqa: ASYNC109
        """Hold one slot for the block; ``EngineBusy`` when none frees up within ``timeout`` seconds."""
        # A parameter rather than asyncio.timeout() around the call: running out means "busy", not "cancelled".
        await self._acquire(priority, timeout)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, priority: int, wait_s: float) -> None:
        if self.in_use < self.limit and not self.waiting:
            self.in_use += 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._order), fut))
        try:
            async with asyncio.timeout(wait_s):
                await asyncio.shield(fut)
        except TimeoutError:
            if not self._give_up(fut):
                return  # the slot arrived at the same moment the clock ran out: keep it
            raise EngineBusy(
                f"All {self.limit} engine slots stayed busy for {wait_s:g} s. Try again in a moment."
            ) from None
        except asyncio.CancelledError:
            if not self._give_up(fut):
                self._release()  # granted, but the caller left: pass the slot on
            raise

    def _give_up(self, fut: asyncio.Future[None]) -> bool:
        """Withdraw a waiter; False when its slot had already been granted."""
        if fut.done():
            return False
        fut.cancel()
        return True

    def _release(self) -> None:
        while self._waiters:
            _, _, fut = heapq.heappop(self._waiters)
            if not fut.done():
                fut.set_result(None)  # hand the slot over: in_use stays the same
                return
        self.in_use -= 1
