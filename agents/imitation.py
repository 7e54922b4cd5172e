"""An imitation prior: the real therapists' choice frequencies given the extracted state.

Fitted on the therapist rows of a data set (:meth:`ImitationAgent.fit`): the frequency of
speaking after a row, of the target kind (the worst-off member, another member, a dyad,
the whole group) and of each strategy, conditioned on state features — the relation
pattern, the worst-off member's distress (low < 0.35 ≤ mid < 0.65 ≤ high) and whether the
therapist spoke last. Sparse cells back off to coarser ones (pattern only, then global)
with add-k smoothing, so every state gets a proper distribution.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

import numpy as np

from agents.base import Ranking
from rescue_env.data.schema import Dialogue
from rescue_env.state import GroupState, StateTracker
from rescue_env.taxonomy.actions import ActionEncoding
from rescue_env.taxonomy.labels import strategies

TARGET_KINDS = ("worst", "other", "dyad", "group")


def _bucket(x: float) -> int:
    return 0 if x < 0.35 else 1 if x < 0.65 else 2


def _features(state: GroupState) -> tuple[str | None, int, bool]:
    return state.pattern, _bucket(state.max_distress()), state.last_speaker == "Therapist"


class ImitationAgent:
    """Acts with the fitted frequencies (sampling by default; ``deterministic`` takes the
    most likely choice)."""

    name = "imitation"

    def __init__(self, scenario: str, encoding: ActionEncoding | None = None, *, deterministic: bool = False, seed: int | None = None):
        self.scenario = scenario
        self.encoding = encoding or ActionEncoding(scenario)
        self.deterministic = deterministic
        self.rng = np.random.default_rng(seed)
        self.strategy_names = strategies(scenario)
        self.speak_counts: Counter = Counter()
        self.target_counts: Counter = Counter()
        self.strategy_counts: Counter = Counter()
        self.n_therapist_rows = 0
        self._spoke_last = False

    # fitting ------------------------------------------------------------------------------
    def fit(self, dialogues: Sequence[Dialogue]) -> ImitationAgent:
        """Count the therapists' choices in ``dialogues`` of this agent's scenario."""
        for d in dialogues:
            if d.scenario != self.scenario:
                continue
            tracker = StateTracker(d.scenario, d.participants)
            for k, row in enumerate(d.rows):
                st = tracker.state
                feats = _features(st)
                if k > 0:
                    self.speak_counts[(feats, row.is_therapist)] += 1
                if row.is_therapist and row.strategy in self.strategy_names:
                    targets = list(row.target)
                    for s in row.support_strategy:
                        targets.extend(s.target)
                    slots = tracker.addressed_slots(targets)
                    kind = self._kind(st, slots)
                    if kind is not None:
                        self.target_counts[(st.pattern, kind)] += 1
                    self.strategy_counts[(st.pattern, row.strategy)] += 1
                    self.n_therapist_rows += 1
                tracker.update(row)
        return self

    @staticmethod
    def _kind(state: GroupState, slots: set[int]) -> str | None:
        if not slots:
            return None
        if len(slots) >= state.n:
            return "group"
        if len(slots) == 2:
            return "dyad"
        if len(slots) > 2:
            return "group"
        return "worst" if next(iter(slots)) == state.worst_off() else "other"

    # probabilities ------------------------------------------------------------------------
    def p_speak(self, state: GroupState) -> float:
        pattern, bucket, spoke = _features(state)

        def rate(match) -> tuple[float, float]:
            yes = sum(c for (f, y), c in self.speak_counts.items() if match(f) and y)
            tot = sum(c for (f, y), c in self.speak_counts.items() if match(f))
            return yes, tot

        y0, n0 = rate(lambda f: True)
        p = (y0 + 1) / (n0 + 2)
        y1, n1 = rate(lambda f: f[0] == pattern)
        p = (y1 + 4 * p) / (n1 + 4)
        y2, n2 = rate(lambda f: f == (pattern, bucket, spoke))
        return float((y2 + 4 * p) / (n2 + 4))

    def kind_probs(self, state: GroupState) -> np.ndarray:
        glob = np.array([sum(c for (p, k), c in self.target_counts.items() if k == kind) for kind in TARGET_KINDS], float) + 1.0
        glob /= glob.sum()
        local = np.array([self.target_counts.get((state.pattern, kind), 0) for kind in TARGET_KINDS], float)
        probs = (local + 4 * glob) / (local.sum() + 4)
        if state.n <= 2:  # a couple's dyad is the couple
            probs[3] += probs[2]
            probs[2] = 0.0
        return probs / probs.sum()

    def strategy_probs(self, state: GroupState) -> np.ndarray:
        glob = np.array([sum(c for (p, s), c in self.strategy_counts.items() if s == name) for name in self.strategy_names], float) + 0.5
        glob /= glob.sum()
        local = np.array([self.strategy_counts.get((state.pattern, name), 0) for name in self.strategy_names], float)
        probs = (local + 3 * glob) / (local.sum() + 3)
        return probs / probs.sum()

    def target_probs(self, state: GroupState, encoding: ActionEncoding) -> np.ndarray:
        kinds = self.kind_probs(state)
        tp = np.zeros(encoding.n_targets)
        order = [int(i) for i in np.argsort(-state.distress, kind="stable")]
        worst = order[0]
        tp[encoding.target_for_slots([worst], state.n)] += kinds[0]
        others = order[1:]
        if others:
            weights = np.array([1.0 / (r + 1) for r in range(len(others))])
            for w, slot in zip(weights / weights.sum(), others):
                tp[encoding.target_for_slots([slot], state.n)] += kinds[1] * w
        else:
            tp[encoding.group_target] += kinds[1]
        if state.n > 2 and len(order) >= 2:
            tp[encoding.target_for_slots(order[:2], state.n)] += kinds[2]
        else:
            tp[encoding.group_target] += kinds[2]
        tp[encoding.group_target] += kinds[3]
        tp *= encoding.target_mask(state.n)
        return tp / tp.sum()

    # protocol ------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None) -> None:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self._spoke_last = False

    def act(self, observation: Any, action_mask: np.ndarray, state: GroupState | None = None) -> int:
        if state is None:
            raise ValueError("ImitationAgent needs the group state: pass info['state'] from the env")
        ranking = self.rank(state, self.encoding)
        speak = ranking.p_speak >= 0.5 if self.deterministic else self.rng.random() < ranking.p_speak
        if not speak:
            self._spoke_last = False
            return 0
        if self.deterministic:
            t, s = int(np.argmax(ranking.target_probs)), int(np.argmax(ranking.strategy_probs))
        else:
            t = int(self.rng.choice(len(ranking.target_probs), p=ranking.target_probs))
            s = int(self.rng.choice(len(ranking.strategy_probs), p=ranking.strategy_probs))
        action = self.encoding.encode(t, s)
        self._spoke_last = bool(action_mask[action])
        return action if action_mask[action] else 0

    def rank(self, state: GroupState, encoding: ActionEncoding) -> Ranking:
        return Ranking(self.p_speak(state), self.target_probs(state, encoding), self.strategy_probs(state))


def fitted_imitation(scenario: str, dialogues: Sequence[Dialogue], encoding: ActionEncoding | None = None, **kw: Any) -> ImitationAgent:
    """An :class:`ImitationAgent` fitted on ``dialogues``; errors clearly if they hold no
    therapist move of the scenario."""
    agent = ImitationAgent(scenario, encoding, **kw).fit(dialogues)
    if agent.n_therapist_rows == 0:
        raise ValueError(f"no {scenario} therapist move with a strategy in the imitation data; point imitation_data at dialogues with {scenario} sessions")
    return agent

