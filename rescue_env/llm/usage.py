"""Token, cost, latency and reliability accounting for LLM calls, per run and per episode."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Usage:
    """Tokens of one reply (or a sum of replies) as the server reported them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens)


@dataclass
class UsageStats:
    """Running totals over calls of ``LLMClient.complete_json``/``complete_text``.

    ``calls`` counts logical calls (a re-ask and the retries belong to their call).
    Tokens, cost and latencies cover only replies the server produced in this run:
    cache hits cost nothing and take no time worth a percentile.
    """

    calls: int = 0
    cache_hits: int = 0
    retries: int = 0
    failures: int = 0
    repaired: int = 0
    reasked: int = 0
    valid_first_try: int = 0
    """Calls whose first reply was usable as it came (no repair, no re-ask)."""
    trimmed: int = 0
    """Calls whose transcript window was shortened to fit the model's context."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None
    """In the currency of the configured prices; None when no prices are set."""
    latencies_s: list[float] = field(default_factory=list)

    def record(
        self,
        *,
        ok: bool,
        cached: bool,
        retries: int,
        repaired: bool,
        reasked: bool,
        billed: Usage,
        latency_s: float,
        cost: float | None,
        trimmed: bool = False,
    ) -> None:
        """Add one finished call. ``billed`` is the usage of its non-cached replies."""
        self.calls += 1
        self.cache_hits += cached
        self.retries += retries
        self.failures += not ok
        self.repaired += repaired
        self.reasked += reasked
        self.valid_first_try += ok and not repaired and not reasked
        self.trimmed += trimmed
        self.prompt_tokens += billed.prompt_tokens
        self.completion_tokens += billed.completion_tokens
        if cost is not None:
            self.cost = (self.cost or 0.0) + cost
        if not cached:
            self.latencies_s.append(latency_s)

    def merge(self, other: UsageStats) -> UsageStats:
        """A new ``UsageStats`` holding both operands' totals (e.g. episodes into a run)."""
        merged = UsageStats()
        for f in fields(UsageStats):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if f.name == "cost":
                setattr(merged, f.name, None if a is None and b is None else (a or 0.0) + (b or 0.0))
            else:
                setattr(merged, f.name, a + b)
        return merged

    __add__ = merge

    def percentile_s(self, q: float) -> float | None:
        """Latency percentile ``q`` (0-100) in seconds; None before any timed call."""
        return float(np.percentile(self.latencies_s, q)) if self.latencies_s else None

    def to_dict(self) -> dict[str, Any]:
        """Flat JSON-ready summary: counters, tokens, cost and latency p50/p90/p95/p99."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "latencies_s"}
        out["total_tokens"] = self.prompt_tokens + self.completion_tokens
        out.update({f"latency_p{q}_s": self.percentile_s(q) for q in (50, 90, 95, 99)})
        return out
