"""Who gets the next free request slot when many episodes share one LLM client.

:class:`PriorityLimiter` is an ``asyncio.Semaphore`` whose waiters are served by priority
(lowest value first, first come first served among equals). The priority of a request is
read from the context variable :data:`request_priority`, which a caller sets around its
calls; tasks it spawns inherit it, as context variables do.

Why: a run of many LLM episodes is done when its slowest episode is. Served first come
first served, the episodes started last are still walking their chain of sequential
requests (therapist, then each client, step after step) when nothing else is left to send,
so the C request slots drain while they finish. The concurrent rollout sets the priority to
the number of steps an episode has played: episodes behind are served first, every episode
in flight moves at about the same pace, and the slots stay full until the last step.
Without a priority set, every request has priority 0 and the order is plain FIFO.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import heapq
import itertools
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

T = TypeVar("T")

#: Priority of the LLM requests made in this context (lower is served first).
request_priority: ContextVar[int] = ContextVar("request_priority", default=0)

#: Priority of a retried attempt: it already waited its turn once, so it goes first (left
#: at the back of the queue, the requests that failed last would make the run's tail).
RETRY_PRIORITY = -(2**62)


class PriorityLimiter:
    """At most ``limit`` concurrent holders; waiters served lowest priority first.

    Use ``async with limiter.slot(): ...`` (priority from :data:`request_priority`) or
    ``slot(priority)``. A freed slot is handed straight to the next waiter, so a new arrival
    cannot overtake the queue. Bound to the event loop it is first used on, like asyncio's
    own primitives.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self.limit = limit
        self._free = limit
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def set_limit(self, limit: int) -> None:
        """Change how many may hold a slot at once. Raising it serves waiters now; lowering
        it takes effect as holders release (none is interrupted)."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self._free += limit - self.limit
        self.limit = limit
        while self._free > 0 and self._hand_over():
            self._free -= 1

    @property
    def in_use(self) -> int:
        """Slots held now."""
        return self.limit - self._free

    @property
    def waiting(self) -> int:
        """Callers queued for a slot (cancelled ones excluded)."""
        return sum(1 for _, _, fut in self._waiters if not fut.done())

    async def acquire(self, priority: int | None = None) -> None:
        """Wait for a slot (``priority`` defaults to :data:`request_priority`)."""
        if self._free > 0:  # a free slot means nobody live is queued: release() hands over first
            self._free -= 1
            return
        prio = request_priority.get() if priority is None else priority
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (prio, next(self._order), fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # handed a slot, then cancelled: pass it on
                self.release()
            raise

    def release(self) -> None:
        """Give a slot back: to the first waiter by priority, or to the pool."""
        if self._free < 0 or not self._hand_over():  # below zero: the limit was lowered
            self._free += 1

    def _hand_over(self) -> bool:
        """Give a slot to the first live waiter; False when none is waiting."""
        while self._waiters:
            _, _, fut = heapq.heappop(self._waiters)
            if not fut.done():  # cancelled waiters are skipped
                fut.set_result(None)
                return True
        return False

    @asynccontextmanager
    async def slot(self, priority: int | None = None) -> AsyncIterator[None]:
        """Hold a slot for the ``async with`` block."""
        await self.acquire(priority)
        try:
            yield
        finally:
            self.release()


def call_blocking(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from synchronous code: on a fresh event loop, or, when this
    thread already runs one (a notebook, an async caller of a sync API), on a worker thread's
    loop while this thread waits."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="rescue-llm") as pool:
        return pool.submit(asyncio.run, coro).result()
