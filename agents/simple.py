"""Baseline therapists: never intervene, and uniform random over the valid actions."""

from __future__ import annotations

from typing import Any

import numpy as np

from rescue_env.agents.base import Ranking
from rescue_env.state import GroupState
from rescue_env.taxonomy.actions import ActionEncoding


class NeverAgent:
    """Always keeps listening (action 0): the do-nothing baseline."""

    name = "never"

    def reset(self, *, seed: int | None = None) -> None:
        pass

    def act(self, observation: Any, action_mask: np.ndarray, state: GroupState | None = None) -> int:
        return 0

    def rank(self, state: GroupState, encoding: ActionEncoding) -> Ranking:
        valid = encoding.target_mask(state.n).astype(float)
        return Ranking(0.0, valid / valid.sum(), np.full(encoding.n_strategies, 1.0 / encoding.n_strategies))


class RandomAgent:
    """Uniform over the actions the mask allows (listening included); seeded."""

    name = "random"

    def __init__(self, seed: int | None = None):
        self.rng = np.random.default_rng(seed)

    def reset(self, *, seed: int | None = None) -> None:
        if seed is not None:
            self.rng = np.random.default_rng(seed)

    def act(self, observation: Any, action_mask: np.ndarray, state: GroupState | None = None) -> int:
        valid = np.flatnonzero(action_mask)
        return int(valid[self.rng.integers(len(valid))])

    def rank(self, state: GroupState, encoding: ActionEncoding) -> Ranking:
        mask = encoding.mask(state.n)
        p_speak = float((mask.sum() - 1) / mask.sum())
        valid = encoding.target_mask(state.n).astype(float)
        # random tie-breaking order so that top-k lists are a random draw, not label order
        jitter = self.rng.random(encoding.n_targets) * 1e-6
        tp = valid / valid.sum() + jitter * valid
        sp = np.full(encoding.n_strategies, 1.0 / encoding.n_strategies) + self.rng.random(encoding.n_strategies) * 1e-6
        return Ranking(p_speak, tp / tp.sum(), sp / sp.sum())
