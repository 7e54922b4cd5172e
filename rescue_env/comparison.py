"""Fair comparisons of therapist agents: the same episodes for everyone, per scenario, and
paired differences against a reference agent.

Every agent of a rollout plays the same (scenario, seed dialogue, episode index) set with the
same reset seeds (:func:`~rescue_env.rollout.episode_seed`), so two agents' returns on one
episode differ only by what the agents did (common random numbers). This module turns the
per-agent episode records into:

- a **per-scenario breakdown**: each scenario summarised over the agents that played it;
- a **pooled** summary over the scenarios that *every* agent played (an agent that cannot
  play a scenario — a policy trained on the other one — takes that scenario out of the pooled
  figures for everyone, instead of comparing unlike sets);
- per agent, the **paired difference** of σ* return against a reference agent
  (``compare_to``, the heuristic by default): the mean of ``return(agent, e) −
  return(reference, e)`` over the episodes ``e`` both finished, with the 95 % Student-t
  interval of the paired differences (:func:`scipy.stats.ttest_rel`). An interval that
  excludes 0 means the agents differ on these episodes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats

from rescue_env.rollout import EpisodeRecord, summarise

#: Scope name of the pooled figures (the scenarios every agent played).
POOLED = "all"
#: The reference agent when none is named: used when it runs, else there is no paired Δ.
DEFAULT_REFERENCE = "heuristic"


def check_reference(compare_to: str | None, agents: Sequence[str], *, named: bool = True) -> None:
    """Raise ``ValueError`` unless ``compare_to`` is ``None`` or one of ``agents`` (the
    agents of the run). With ``named=False`` (a default, not the user's choice)
    :data:`DEFAULT_REFERENCE` may be absent: the run then has no paired Δ."""
    if compare_to is None or compare_to in agents or (not named and compare_to == DEFAULT_REFERENCE):
        return
    raise ValueError(
        f"compare_to={compare_to!r} is not an agent of this run; name one of {', '.join(agents)} "
        "(or null for no paired Δ)"
    )


def episode_key(record: EpisodeRecord) -> tuple[str, str, int]:
    """What makes two agents' episodes the same episode: (scenario, seed dialogue, index)."""
    return (record.scenario, record.seed_sample_id, record.episode)


def paired_interval(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> dict[str, Any]:
    """Mean of ``a[k] − b[k]`` (paired: element k of both is the same episode) with its
    Student-t interval (:func:`scipy.stats.ttest_rel`).

    Returns ``{"mean", "ci_low", "ci_high", "ci95", "n"}``: the mean difference, the bounds
    and half-width of the interval at ``confidence``, the number of pairs. With fewer than
    two pairs the interval is NaN (one pair says nothing about the spread); with none every
    figure is NaN and ``n`` is 0; identical differences give a zero-width interval.
    """
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape:
        raise ValueError(f"paired samples must have the same length, got {len(x)} and {len(y)}")
    nan = float("nan")
    if len(x) == 0:
        return {"mean": nan, "ci_low": nan, "ci_high": nan, "ci95": nan, "n": 0}
    diff = x - y
    mean = float(diff.mean())
    if len(diff) < 2:
        return {"mean": mean, "ci_low": nan, "ci_high": nan, "ci95": nan, "n": 1}
    if np.allclose(diff, diff[0]):
        return {"mean": mean, "ci_low": mean, "ci_high": mean, "ci95": 0.0, "n": len(diff)}
    ci = stats.ttest_rel(x, y).confidence_interval(confidence_level=confidence)
    low, high = float(ci.low), float(ci.high)
    return {"mean": mean, "ci_low": low, "ci_high": high, "ci95": (high - low) / 2, "n": len(diff)}


def paired_difference(
    records: Sequence[EpisodeRecord], reference: Sequence[EpisodeRecord], confidence: float = 0.95
) -> dict[str, Any]:
    """σ* return of ``records`` minus that of ``reference`` on the episodes both finished
    (matched by :func:`episode_key`), as :func:`paired_interval`."""
    ref = {episode_key(r): r.sigma_return for r in reference if not r.failed}
    pairs = [(r.sigma_return, ref[episode_key(r)]) for r in records if not r.failed and episode_key(r) in ref]
    return paired_interval([a for a, _ in pairs], [b for _, b in pairs], confidence)


def compare(
    records_by_agent: Mapping[str, Sequence[EpisodeRecord]], compare_to: str | None = DEFAULT_REFERENCE
) -> dict[str, Any]:
    """Per-agent figures on the same episodes, pooled and per scenario, with paired
    differences against ``compare_to`` (none when it is null, or when it is
    :data:`DEFAULT_REFERENCE` and that agent is not in the run). Any other name must be an
    agent of the run: ``ValueError`` listing them otherwise (:func:`check_reference`).

    Returns ``{"compare_to", "scenarios", "pooled_scenarios", "left_out", "agents"}``:
    ``scenarios`` every scenario played, ``pooled_scenarios`` those every agent played,
    ``left_out`` ``{scenario: [agents that did not play it]}``; ``agents[name]`` is
    :func:`~rescue_env.rollout.summarise` over the pooled scenarios plus ``"paired"`` (the
    difference to the reference, absent for the reference itself) and ``"by_scenario"``
    (the same figures per scenario the agent played).
    """
    check_reference(compare_to, list(records_by_agent), named=compare_to != DEFAULT_REFERENCE)
    scenarios = sorted({r.scenario for recs in records_by_agent.values() for r in recs})
    played = {name: {r.scenario for r in recs} for name, recs in records_by_agent.items()}
    pooled = [s for s in scenarios if all(s in p for p in played.values())]
    left_out = {s: [n for n, p in played.items() if s not in p] for s in scenarios if s not in pooled}
    reference = compare_to if compare_to in records_by_agent else None
    agents: dict[str, Any] = {}
    for name, recs in records_by_agent.items():
        scoped = {POOLED: [r for r in recs if r.scenario in pooled]}
        scoped.update({s: [r for r in recs if r.scenario == s] for s in scenarios if s in played[name]})
        figures: dict[str, Any] = {}
        for scope, rs in scoped.items():
            fig = summarise(rs)
            if reference is not None and name != reference:
                fig["paired"] = paired_difference(rs, records_by_agent[reference])
            figures[scope] = fig
        agents[name] = {**figures.pop(POOLED), "by_scenario": figures}
    return {
        "compare_to": reference,
        "scenarios": scenarios,
        "pooled_scenarios": pooled,
        "left_out": left_out,
        "agents": agents,
    }


def scoped_summaries(comparison: Mapping[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(agent, scope, figures) for every agent: the pooled scope first, then each scenario
    (the rows of ``summary.csv`` and the report's full table)."""
    out = []
    for name, fig in comparison["agents"].items():
        out.append((name, POOLED, {k: v for k, v in fig.items() if k != "by_scenario"}))
        out += [(name, scope, f) for scope, f in fig["by_scenario"].items()]
    return out


def is_significant(paired: Mapping[str, Any]) -> bool:
    """Whether a paired difference's interval excludes 0."""
    low, high = paired.get("ci_low", math.nan), paired.get("ci_high", math.nan)
    return bool(low > 0 or high < 0)
