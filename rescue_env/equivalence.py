"""The σ*-return measurement behind the simulator's statistical-equivalence check: the
figures a rewrite of the simulator must keep.

Estimand, per scenario and baseline agent (never / random / heuristic / imitation): the
expected discounted σ* return (``info["sigma_return"]`` at the episode's end) of an episode
started the way ``env.reset(seed=...)`` starts one by default — a bundled seed dialogue
drawn uniformly, cut uniformly at a row in ``[min_prefix, last row]``.

Design: stratified by (seed dialogue, start row). Every cell is played ``reps`` times with its
own reset seed; a cell's weight is ``1 / (dialogues × start rows of its dialogue)``, so the
weighted mean estimates exactly the default-reset expectation while the spread between
starting states (3–5× the within-cell variance on the bundled seeds) leaves the error. The
95 % interval is the normal interval of a stratified mean, ``se² = Σ_c w_c² s_c² / reps``
(``s_c²``: the cell's sample variance; hundreds of cells, so the normal quantile is apt).

Only the public API is used — ``gymnasium.make(ENV_ID)``, ``reset(seed=, options={"dialogue",
"start_row"})``, ``step``, ``info["action_mask"]``, ``info["state"]``, the final
``info["sigma_return"]`` — and the agent is the caller's (``agents.make_agent``), so the
measurement survives a rewrite of the env internals. ``benchmarks/sigma_star_reference.py``
records the reference figures with it; ``tests/envs/test_sigma_star_equivalence.py``
re-measures on fresh seeds and compares.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from scipy import stats

from rescue_env.data import Dialogue, load_dialogues

ENV_IDS = {"couple": "rescue_env/Couple-v0", "family": "rescue_env/Family-v0"}
AGENTS = ("never", "random", "heuristic", "imitation")
#: the envs' default ``min_prefix``: the first row an episode may start at
MIN_PREFIX = 2


@dataclass(frozen=True)
class Estimate:
    """A stratified σ*-return estimate of one agent in one scenario."""

    n: int
    mean: float
    se: float
    ci_low: float
    ci_high: float
    #: per-episode standard deviation of the return (weighted like the mean)
    sd: float
    #: the pooled within-cell standard deviation (what is left after stratifying)
    within_cell_sd: float

    def to_json(self) -> dict[str, float]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def cells(scenario: str, dialogues: Sequence[Dialogue] | None = None) -> list[tuple[str, int, float]]:
    """The design's strata: ``(sample_id, start_row, weight)`` over the bundled seed dialogues
    of ``scenario``; weights sum to 1 (uniform dialogue, then uniform start row)."""
    ds = [d for d in (dialogues if dialogues is not None else load_dialogues()) if d.scenario == scenario]
    if not ds:
        raise ValueError(f"no seed dialogues of scenario {scenario!r}")
    out = []
    for d in ds:
        rows = range(min(MIN_PREFIX, len(d.rows) - 1), len(d.rows))
        out.extend((d.sample_id, k, 1.0 / (len(ds) * len(rows))) for k in rows)
    return out


def design_summary(scenario: str) -> dict[str, int]:
    """Start rows per seed dialogue (stored with the reference, so a changed seed set is caught)."""
    counts: dict[str, int] = {}
    for sample_id, _, _ in cells(scenario):
        counts[sample_id] = counts.get(sample_id, 0) + 1
    return counts


def episode_seed(base_seed: int, sample_id: str, start_row: int, rep: int) -> int:
    """The reset seed of repetition ``rep`` of a cell (same for every agent: common random numbers)."""
    return (base_seed * 1_000_003 + zlib.crc32(f"{sample_id}#{start_row}".encode()) * 97 + rep) % (2**31 - 1)


def play(env: gym.Env, agent: Any, sample_id: str, start_row: int, seed: int) -> float:
    """One episode of ``agent`` from ``(sample_id, start_row)``: its discounted σ* return."""
    obs, info = env.reset(seed=seed, options={"dialogue": sample_id, "start_row": start_row})
    agent.reset(seed=seed)
    while True:
        action = int(agent.act(obs, info["action_mask"], info["state"]))
        obs, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return float(info["sigma_return"])


def measure(scenario: str, agent: Any, reps: int, base_seed: int) -> Estimate:
    """Play every cell of ``scenario`` ``reps`` times (``reps`` ≥ 2) with ``agent`` (a
    therapist agent of that scenario, e.g. ``agents.make_agent(name, scenario,
    seed=base_seed)``; ``reset`` reseeds it) and return the stratified estimate."""
    if reps < 2:
        raise ValueError(f"reps must be at least 2 (a cell's variance needs two episodes), got {reps}")
    env = gym.make(ENV_IDS[scenario])
    design = cells(scenario)
    returns = np.empty((len(design), reps))
    try:
        for c, (sample_id, start_row, _) in enumerate(design):
            for r in range(reps):
                returns[c, r] = play(env, agent, sample_id, start_row, episode_seed(base_seed, sample_id, start_row, r))
    finally:
        env.close()
    return stratified(returns, np.array([w for _, _, w in design]))


def stratified(returns: np.ndarray, weights: np.ndarray, level: float = 0.95) -> Estimate:
    """The stratified mean of ``returns`` (cells × reps) with cell ``weights`` (summing to 1)."""
    cell_mean = returns.mean(axis=1)
    cell_var = returns.var(axis=1, ddof=1)
    reps = returns.shape[1]
    mean = float(weights @ cell_mean)
    se = math.sqrt(float((weights**2) @ cell_var) / reps)
    z = float(stats.norm.ppf(0.5 + level / 2))
    sd = math.sqrt(float(weights @ ((returns - mean) ** 2).mean(axis=1)))
    return Estimate(
        n=int(returns.size), mean=mean, se=se, ci_low=mean - z * se, ci_high=mean + z * se, sd=sd,
        within_cell_sd=math.sqrt(float(weights @ cell_var)),
    )


def load_reference(path: str | Path) -> dict[str, Any]:
    """Reference figures recorded by ``benchmarks/sigma_star_reference.py``."""
    return json.loads(path.read_text(encoding="utf-8"))
