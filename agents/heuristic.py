"""A rule-based therapist from clinical theory.

When to speak: when the worst-off member's distress reaches ``speak_threshold``, when the
pattern is destructive (negative valence) and someone is at least moderately distressed,
or when a distressed member has gone untended for ``sidelined_after`` rows — but not twice
in a row unless distress is severe (clients need room to answer).

Whom: the sidelined member if there is one (counterbalancing, structural family therapy's
unbalancing), else the worst-off member; in mutual escalation with everyone highly
distressed, the whole group (de-escalate the system first, Gottman).

How, by pattern (EFT, Gottman, IBCT, structural family therapy): track/evoke the cycle in
pursue-withdraw; safeguard, then reframe, in attack-attack and escalation; enact/evoke to
re-engage withdrawers; join/repair to consolidate softening; goal_align once aligned;
boundary work in coalitions and hierarchy strain; counterbalance a sidelined member.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rescue_env.agents.base import Ranking
from rescue_env.state import GroupState
from rescue_env.taxonomy.actions import ActionEncoding
from rescue_env.taxonomy.labels import label_info

#: pattern -> strategies in order of preference (first = high distress, second = otherwise).
STRATEGY_BY_PATTERN: dict[str, dict[str | None, tuple[str, ...]]] = {
    "couple": {
        "pursue_withdraw": ("evoke", "track", "reframe"),
        "attack_attack": ("safeguard", "reframe", "detach"),
        "withdraw_withdraw": ("enact", "evoke", "join"),
        "repair_softening": ("join", "repair", "enact"),
        "constructive_alignment": ("goal_align", "repair", "join"),
        "mixed_transition": ("track", "reframe", "join"),
        None: ("join", "track", "evoke"),
    },
    "family": {
        "escalation_conflict": ("safeguard", "boundary", "reframe"),
        "pursue_withdraw": ("track", "counterbalance", "reframe"),
        "mutual_disengagement": ("enact", "join", "counterbalance"),
        "cross_generational_coalition": ("boundary", "counterbalance", "reframe"),
        "boundary_hierarchy_strain": ("boundary", "reframe", "join"),
        "repair_softening": ("repair", "join", "enact"),
        "cooperative_family_alliance": ("enact", "repair", "join"),
        "mixed_transition": ("track", "reframe", "join"),
        None: ("join", "track", "counterbalance"),
    },
}


class HeuristicAgent:
    """Rule-based therapist (see the module docstring). Needs ``state`` in :meth:`act`."""

    name = "heuristic"

    def __init__(
        self,
        scenario: str,
        encoding: ActionEncoding | None = None,
        *,
        speak_threshold: float = 0.5,
        severe_threshold: float = 0.75,
        sidelined_after: int = 6,
    ):
        self.scenario = scenario
        self.encoding = encoding or ActionEncoding(scenario)
        self.speak_threshold = speak_threshold
        self.severe_threshold = severe_threshold
        self.sidelined_after = sidelined_after
        self._valence = {li.name: li.valence for li in label_info(scenario, "pattern")}
        self._spoke_last = False

    def reset(self, *, seed: int | None = None) -> None:
        self._spoke_last = False

    # the three decisions -------------------------------------------------------------------
    def should_speak(self, state: GroupState, spoke_last: bool = False) -> bool:
        worst = state.max_distress()
        destructive = self._valence.get(state.pattern or "", 0.0) < 0
        sidelined = self.sidelined(state) is not None
        wants = worst >= self.speak_threshold or (destructive and worst >= 0.35) or sidelined
        return wants and (not spoke_last or worst >= self.severe_threshold)

    def sidelined(self, state: GroupState) -> int | None:
        """A distressed member untended for long, other than the worst-off, if any."""
        candidates = [
            i for i in range(state.n) if state.untended[i] >= self.sidelined_after and state.distress[i] >= 0.35
        ]
        return max(candidates, key=lambda i: state.distress[i]) if candidates else None

    def target(self, state: GroupState) -> int:
        n = state.n
        escalated = state.pattern in ("attack_attack", "escalation_conflict")
        if escalated and n > 1 and float(state.distress.min()) >= 0.5:
            return self.encoding.group_target
        side = self.sidelined(state)
        slot = side if side is not None else state.worst_off()
        return self.encoding.target_for_slots([slot], n)

    def strategies(self, state: GroupState) -> tuple[str, ...]:
        table = STRATEGY_BY_PATTERN[self.scenario]
        prefs = table.get(state.pattern, table[None])
        if self.sidelined(state) is not None and "counterbalance" in self.encoding.strategy_names:
            prefs = ("counterbalance", *[p for p in prefs if p != "counterbalance"])
        elif state.max_distress() < self.severe_threshold and len(prefs) > 1:
            prefs = (prefs[1], prefs[0], *prefs[2:])
        return prefs

    # protocol ------------------------------------------------------------------------------
    def act(self, observation: Any, action_mask: np.ndarray, state: GroupState | None = None) -> int:
        if state is None:
            raise ValueError("HeuristicAgent needs the group state: pass info['state'] from the env")
        if not self.should_speak(state, self._spoke_last):
            self._spoke_last = False
            return 0
        action = self.encoding.encode(self.target(state), self.encoding.strategy_index(self.strategies(state)[0]))
        if not action_mask[action]:
            self._spoke_last = False
            return 0
        self._spoke_last = True
        return action

    def rank(self, state: GroupState, encoding: ActionEncoding) -> Ranking:
        spoke_last = state.last_speaker == "Therapist"
        p_speak = 0.85 if self.should_speak(state, spoke_last) else 0.15
        valid = encoding.target_mask(state.n).astype(float)
        tp = valid * 0.01
        first = self.target(state)
        tp[first] = 1.0
        # then members by distress, then the group
        for rank_i, slot in enumerate(np.argsort(-state.distress, kind="stable")):
            t = encoding.target_for_slots([int(slot)], state.n)
            tp[t] = max(tp[t], 0.5 / (rank_i + 1))
        tp[encoding.group_target] = max(tp[encoding.group_target], 0.2)
        tp *= valid
        sp = np.full(encoding.n_strategies, 0.01)
        for k, name in enumerate(self.strategies(state)):
            sp[encoding.strategy_index(name)] = 1.0 / (k + 1)
        return Ranking(p_speak, tp / tp.sum(), sp / sp.sum())
