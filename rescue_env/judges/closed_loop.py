"""Closed-loop view of an episode: did the group get better, and did the therapist explore
feelings before advising?

Per episode (:func:`episode_metrics`):

- **distress reduction** of the group: mean distress in the first state minus the last
  (> 0: the group ended calmer); of its **worst-off member**: that member's (the most
  distressed in the first state) distress first minus last; and the reduction of the max
  (the bucket effect's own term, whoever holds it at the end).
- **strategy-path health**: therapist turns in order, their strategies classed as
  *exploring feelings* (default ``evoke``, ``join``, ``track``) or *advice-like* (default
  ``reframe``, ``goal_align``). ``explored_before_advice`` is True when an exploring move came
  before the first advice-like one (None when no advice was given); ``advice_position`` is
  how far into the therapist's turns the first advice came (0 = the very first move, 1 = the
  last; None without advice); ``premature_advice`` when advice came with no exploring move
  before it. ``healthy`` = no premature advice.

States come from each row's ``state`` column (simulated episodes) and otherwise from the
annotations (:func:`rescue_env.state.iter_states`), so real dialogues get the same view. A
simulated episode's seed history (its first ``start_row`` rows) is left out: "first" is the
state the agent was handed, and only the agent's own therapist turns make the path.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from statistics import mean
from typing import Any, Iterable, Sequence

import numpy as np

from rescue_env.data.schema import THERAPIST, Dialogue
from rescue_env.judges.config import ADVICE_STRATEGIES, EXPLORE_STRATEGIES
from rescue_env.judges.items import agent_of, history_rows, seed_of
from rescue_env.state import iter_states


@dataclass(slots=True)
class EpisodeMetrics:
    """Closed-loop figures of one episode (see the module doc)."""

    sample_id: str
    agent: str
    seed_sample_id: str
    episode: int | None
    start_row: int
    n_rows: int
    members: list[str]
    first_distress: list[float]
    last_distress: list[float]
    group_reduction: float
    worst_off_member: str | None
    worst_off_reduction: float
    max_reduction: float
    n_therapist_turns: int
    strategies: list[str]
    first_explore_turn: int | None
    first_advice_turn: int | None
    explored_before_advice: bool | None
    advice_position: float | None
    premature_advice: bool
    healthy: bool
    sigma_return: float | None
    failed: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _distress_series(dialogue: Dialogue) -> tuple[list[str], list[np.ndarray]]:
    members = list(dialogue.participants)
    from_column: list[np.ndarray] = []
    for row in dialogue.rows:
        st = row.extras.get("state")
        if not isinstance(st, dict) or not isinstance(st.get("distress"), list):
            from_column = []
            break
        names = st.get("members") or members
        by = dict(zip(names, st["distress"]))
        if not all(m in by and by[m] is not None for m in members):
            from_column = []
            break
        from_column.append(np.array([float(by[m]) for m in members]))
    if from_column:
        return members, from_column
    return members, [s.distress.copy() for s in iter_states(dialogue)]


def strategy_path(
    strategies: Sequence[str | None],
    explore: Iterable[str] = EXPLORE_STRATEGIES,
    advice: Iterable[str] = ADVICE_STRATEGIES,
) -> dict[str, Any]:
    """Path health of a sequence of therapist strategies (1-based turn numbers)."""
    ex, ad = set(explore), set(advice)
    first_ex = next((k for k, s in enumerate(strategies, 1) if s in ex), None)
    first_ad = next((k for k, s in enumerate(strategies, 1) if s in ad), None)
    n = len(strategies)
    if first_ad is None:
        before, position, premature = None, None, False
    else:
        before = first_ex is not None and first_ex < first_ad
        position = 0.0 if n <= 1 else (first_ad - 1) / (n - 1)
        premature = not before
    return {
        "first_explore_turn": first_ex,
        "first_advice_turn": first_ad,
        "explored_before_advice": before,
        "advice_position": None if position is None else round(position, 4),
        "premature_advice": premature,
        "healthy": not premature,
    }


def episode_metrics(
    dialogue: Dialogue,
    *,
    explore: Iterable[str] = EXPLORE_STRATEGIES,
    advice: Iterable[str] = ADVICE_STRATEGIES,
) -> EpisodeMetrics:
    """Closed-loop metrics of one dialogue or episode."""
    members, series = _distress_series(dialogue)
    start = history_rows(dialogue)
    # A simulated episode starts after its seed history: the agent is judged from the state
    # it was handed (after row start_row), not from the seed session's opening.
    series = series[start - 1 :] if start > 0 else series
    if series and members:
        first, last = series[0], series[-1]
        w = int(np.argmax(first))
        group_red = float(first.mean() - last.mean())
        worst, worst_red = members[w], float(first[w] - last[w])
        max_red = float(first.max() - last.max())
    else:
        first = last = np.zeros(0)
        group_red = worst_red = max_red = 0.0
        worst = None
    strategies = [
        r.strategy or ""
        for r in dialogue.rows[start:]
        if r.primary_speaker == THERAPIST and r.dialogue_cleaned.strip()
    ]
    path = strategy_path(strategies, explore, advice)
    sigma = dialogue.extras.get("sigma_return")
    episode = dialogue.extras.get("episode")
    return EpisodeMetrics(
        sample_id=dialogue.sample_id,
        agent=agent_of(dialogue),
        seed_sample_id=seed_of(dialogue),
        episode=int(episode) if isinstance(episode, (int, float)) else None,
        start_row=start,
        n_rows=len(dialogue.rows),
        members=members,
        first_distress=[round(float(x), 4) for x in first],
        last_distress=[round(float(x), 4) for x in last],
        group_reduction=round(group_red, 4),
        worst_off_member=worst,
        worst_off_reduction=round(worst_red, 4),
        max_reduction=round(max_red, 4),
        n_therapist_turns=len(strategies),
        strategies=strategies,
        sigma_return=float(sigma) if isinstance(sigma, (int, float)) else None,
        failed=bool(dialogue.extras.get("failed", False)),
        **path,
    )


def summarise(episodes: Sequence[EpisodeMetrics]) -> dict[str, dict[str, Any]]:
    """Per agent: episode count and means of the closed-loop figures (failed episodes are
    counted and left out of the means)."""
    by: dict[str, list[EpisodeMetrics]] = defaultdict(list)
    for e in episodes:
        by[e.agent].append(e)
    out: dict[str, dict[str, Any]] = {}
    for agent, es in sorted(by.items()):
        ok = [e for e in es if not e.failed]
        with_advice = [e for e in ok if e.first_advice_turn is not None]

        def m(vals: list[float]) -> float | None:
            return round(mean(vals), 4) if vals else None

        out[agent] = {
            "episodes": len(es),
            "failed": len(es) - len(ok),
            "group_reduction": m([e.group_reduction for e in ok]),
            "worst_off_reduction": m([e.worst_off_reduction for e in ok]),
            "max_reduction": m([e.max_reduction for e in ok]),
            "therapist_turns": m([float(e.n_therapist_turns) for e in ok]),
            "healthy_share": m([float(e.healthy) for e in ok]),
            "advice_share": m([float(e.first_advice_turn is not None) for e in ok]),
            "explored_before_advice_share": m([float(bool(e.explored_before_advice)) for e in with_advice]),
            "advice_position": m([e.advice_position for e in with_advice if e.advice_position is not None]),
            "sigma_return": m([e.sigma_return for e in ok if e.sigma_return is not None]),
        }
    return out
