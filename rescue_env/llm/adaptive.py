"""Requests in flight sized to the server: additive increase, multiplicative decrease.

``llm.max_concurrency`` is a ceiling, not a promise: ``llama-cpp-python``'s server works on
one request at a time and queues the rest, so 16 requests in flight there wait in its queue
until they time out, and their retries add load (the storm an issue run showed: 9 of 9
episodes failed). :class:`AdaptiveConcurrency` moves the client's limit (a
:class:`~rescue_env.concurrency.PriorityLimiter`) the way TCP moves its window:

- **decrease** (×``decrease``, at least 1) when more than ``overload_share`` of a window of
  answers (as many as the limit, at least ``min_window``) were timeouts, 429s or 503s — a few scattered ones are
  retried, not read as overload, or a 2 % rate of 429s would pin the limit at 1 — or when
  the median reply of a round trip (as many replies as the limit, at least
  ``latency_window``) came back ``tolerance`` times slower than the fastest seen for its kind
  of call: a server that queues shows latency growing with the requests in flight, a
  batching server such as vLLM far less. The median, not a running average: a few slow
  replies (a retry burst, a busy client machine) halved 64 requests in flight on a mock
  server that never queued. At most once per round trip: only requests *sent* after the
  last decrease count towards the next one, so one burst of late replies counts once.
- **increase** by ``1/limit`` per reply that came back at a normal pace (one slot per window
  of replies), up to the ceiling.

Latency is timed from when a request is sent (it holds a slot), not from when it was queued
in the client. The limit starts at the ceiling, so a server that batches loses nothing.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import openai

from rescue_env.concurrency import PriorityLimiter

log = logging.getLogger("rescue_env.llm")


@dataclass
class AdaptiveConcurrency:
    """AIMD controller of a :class:`PriorityLimiter`'s limit (see the module docstring).

    Args:
        ceiling: the most requests in flight (``llm.max_concurrency``).
        tolerance: median latency of a round trip / fastest latency above which the server is queueing.
        decrease: factor applied to the limit on a decrease.
        latency_window: fewest replies whose median latency decides a decrease.
        overload_share: share of timeouts/429/503 in a window of answers that means overload.
        min_window: fewest answers a window holds (a share of a handful is noise).
        slack_s: added to the fastest latency before the ratio is taken, so that the jitter of
            replies a few milliseconds apart (a loopback mock) is not read as queueing.
    """

    ceiling: int
    tolerance: float = 2.0
    decrease: float = 0.5
    latency_window: int = 4
    overload_share: float = 0.25
    min_window: int = 16
    slack_s: float = 0.02
    limit: float = field(init=False)
    lowest: int = field(init=False)
    decreases: int = 0
    overloads: int = 0
    """Timeouts, 429s and 503s seen."""
    _fastest: dict[str, float] = field(default_factory=dict)
    _ratios: list[float] = field(default_factory=list)
    _window: int = 0
    _window_overloads: int = 0
    _last_decrease: float = -math.inf
    _limiters: list[PriorityLimiter] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.ceiling < 1:
            raise ValueError(f"ceiling must be >= 1, not {self.ceiling}")
        self.limit = float(self.ceiling)
        self.lowest = self.ceiling

    @property
    def slots(self) -> int:
        """The limit as a whole number of requests."""
        return max(1, min(self.ceiling, int(self.limit)))

    def limiter(self) -> PriorityLimiter:
        """A limiter that follows this controller (one per event loop; the limit carries over)."""
        limiter = PriorityLimiter(self.slots)
        self._limiters = [limiter]
        return limiter

    def on_reply(self, kind: str, sent_at: float, latency_s: float) -> None:
        """A reply to a request of ``kind`` sent at ``sent_at`` (``time.perf_counter``) came
        back after ``latency_s`` seconds."""
        fastest = self._fastest.get(kind)
        if fastest is None or latency_s < fastest:
            self._fastest[kind] = fastest = max(latency_s, 1e-6)
        if sent_at <= self._last_decrease:
            return  # sent under the old limit: says nothing about the new one
        if self._count(overload=False):
            return
        ratio = latency_s / (fastest + self.slack_s)
        self._ratios.append(ratio)
        if len(self._ratios) >= max(self.slots, self.latency_window):
            median = statistics.median(self._ratios)
            self._ratios.clear()
            if median > self.tolerance:
                self._decrease(sent_at, f"median latency {median:.1f}x the fastest")
                return
        if ratio <= self.tolerance and self.limit < self.ceiling:
            self._set(self.limit + 1.0 / self.limit)

    def on_error(self, exc: BaseException, sent_at: float) -> None:
        """A request sent at ``sent_at`` failed with ``exc``: a timeout, 429 or 503 is a sign
        of overload and decreases the limit; other errors say nothing about load."""
        if isinstance(exc, openai.APITimeoutError):
            reason = "timeout"
        elif isinstance(exc, openai.APIStatusError) and exc.status_code in (429, 503):
            reason = f"HTTP {exc.status_code}"
        else:
            return
        self.overloads += 1
        if sent_at > self._last_decrease:
            self._count(overload=True, reason=reason)

    def _count(self, *, overload: bool, reason: str = "") -> bool:
        """Add an answer to the window; at its end, decrease if overloads passed their share.
        Returns True when it decreased."""
        self._window += 1
        self._window_overloads += overload
        if self._window < max(self.slots, self.min_window):
            return False
        share = self._window_overloads / self._window
        self._window = self._window_overloads = 0
        if share > self.overload_share:
            self._decrease(math.inf, f"{share:.0%} of answers were {reason or 'timeouts, 429 or 503'}")
            return True
        return False

    def report(self) -> dict[str, Any]:
        """Ceiling, limit now, lowest limit, decreases and overloads (for ``metrics.json``)."""
        return {
            "max_concurrency": self.ceiling,
            "limit": self.slots,
            "lowest_limit": self.lowest,
            "decreases": self.decreases,
            "overloads": self.overloads,
        }

    def _decrease(self, sent_at: float, reason: str) -> None:
        if sent_at <= self._last_decrease or self.limit <= 1:  # already counted, or at the floor
            return
        self._last_decrease = time.perf_counter()
        self.decreases += 1
        self._ratios.clear()  # judge the new limit on replies to requests sent under it
        self._window = self._window_overloads = 0
        self._set(max(1.0, self.limit * self.decrease))
        log.info("requests in flight: %d (%s)", self.slots, reason)

    def _set(self, limit: float) -> None:
        self.limit = min(float(self.ceiling), limit)
        self.lowest = min(self.lowest, self.slots)
        for limiter in self._limiters:
            if limiter.limit != self.slots:
                limiter.set_limit(self.slots)
