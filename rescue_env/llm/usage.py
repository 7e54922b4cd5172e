"""Token, cost, latency and reliability accounting for LLM calls, per run and per episode.

Besides the prompt and reply tokens every server reports, a reply may say how much of its
prompt the server found already evaluated (``usage.prompt_tokens_details.cached_tokens``:
OpenAI, vLLM; ``timings.cache_n``: llama.cpp's server and the embedded ``llm=local`` one) and
how long it spent evaluating the rest and generating (``timings.prompt_ms``/``predicted_ms``).
Those figures are None where no reply reported them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np


def _add(a: Any, b: Any) -> Any:
    """Sum of two figures a server may not report (None: not reported)."""
    return None if a is None and b is None else (a or 0) + (b or 0)


@dataclass(frozen=True)
class Usage:
    """Tokens of one reply (or a sum of replies) as the server reported them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int | None = None
    """Prompt tokens the server did not evaluate (found in its context or prompt cache)."""
    prompt_s: float | None = None
    """Seconds the server spent evaluating the rest of the prompt."""
    completion_s: float | None = None
    """Seconds the server spent generating the reply."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(*(_add(getattr(self, f.name), getattr(other, f.name)) for f in fields(Usage)))

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> Usage:
        """The usage of a Chat Completions response body: ``usage`` and, where the server
        adds them, ``usage.prompt_tokens_details.cached_tokens`` and llama.cpp's ``timings``
        (malformed counts read as not reported)."""
        reported, timings = body.get("usage"), body.get("timings")
        reported = reported if isinstance(reported, dict) else {}
        timings = timings if isinstance(timings, dict) else {}
        details = reported.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        if cached is None:
            cached = timings.get("cache_n")
        prompt_ms, predicted_ms = timings.get("prompt_ms"), timings.get("predicted_ms")
        try:
            return cls(
                int(reported.get("prompt_tokens") or 0),
                int(reported.get("completion_tokens") or 0),
                None if cached is None else int(cached),
                None if prompt_ms is None else float(prompt_ms) / 1000,
                None if predicted_ms is None else float(predicted_ms) / 1000,
            )
        except (TypeError, ValueError):  # a malformed count costs the accounting, not the reply
            return cls()


#: Fields of :class:`UsageStats` that stay None while no reply reported them.
_OPTIONAL = ("cost", "cached_prompt_tokens", "prompt_s", "completion_s")


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
    cached_prompt_tokens: int | None = None
    """Prompt tokens the server found already evaluated (None: it does not say)."""
    prompt_s: float | None = None
    """Server seconds evaluating prompts (None: it does not say)."""
    completion_s: float | None = None
    """Server seconds generating replies (None: it does not say)."""
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
        self.cached_prompt_tokens = _add(self.cached_prompt_tokens, billed.cached_prompt_tokens)
        self.prompt_s = _add(self.prompt_s, billed.prompt_s)
        self.completion_s = _add(self.completion_s, billed.completion_s)
        if cost is not None:
            self.cost = (self.cost or 0.0) + cost
        if not cached:
            self.latencies_s.append(latency_s)

    def merge(self, other: UsageStats) -> UsageStats:
        """A new ``UsageStats`` holding both operands' totals (e.g. episodes into a run)."""
        merged = UsageStats()
        for f in fields(UsageStats):
            a, b = getattr(self, f.name), getattr(other, f.name)
            setattr(merged, f.name, _add(a, b) if f.name in _OPTIONAL else a + b)
        return merged

    __add__ = merge

    def percentile_s(self, q: float) -> float | None:
        """Latency percentile ``q`` (0-100) in seconds; None before any timed call."""
        return float(np.percentile(self.latencies_s, q)) if self.latencies_s else None

    def to_dict(self) -> dict[str, Any]:
        """Flat JSON-ready summary: counters, tokens, cost and latency p50/p90/p95/p99; where
        the server reported them, ``evaluated_prompt_tokens`` (prompt tokens less those found
        evaluated), their share of the prompt tokens, and the server's prompt-evaluation and
        generation speeds in tokens/s."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "latencies_s"}
        out["total_tokens"] = self.prompt_tokens + self.completion_tokens
        evaluated = None if self.cached_prompt_tokens is None else self.prompt_tokens - self.cached_prompt_tokens
        out["evaluated_prompt_tokens"] = evaluated
        out["evaluated_prompt_share"] = evaluated / self.prompt_tokens if evaluated is not None and self.prompt_tokens else None
        out["prompt_eval_tokens_per_s"] = evaluated / self.prompt_s if evaluated is not None and self.prompt_s else None
        out["generation_tokens_per_s"] = self.completion_tokens / self.completion_s if self.completion_s else None
        out.update({f"latency_p{q}_s": self.percentile_s(q) for q in (50, 90, 95, 99)})
        return out
