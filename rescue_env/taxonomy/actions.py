"""The therapist's action encoding, shared by every environment and agent.

A decision is ``z_t`` (speak or keep listening), a target option ``A_t`` (one member, a
dyad, or the whole group) and a strategy ``a_t``. The canonical form is one flat
``Discrete(1 + T * S)``:

- action ``0``: keep listening (no intervention);
- action ``1 + t * S + s``: speak to target option ``t`` with strategy ``s``.

Target options are indexed over member *slots* (the group padded to ``max_members``):
individuals first (slot order), then dyads (lexicographic pairs), then the whole group last.
For a couple the only dyad is the whole group, so couples have ``[A, B, Couple]``.
A dyad is valid only when both slots are present and the group has more than two members.

Masks come in three shapes, all derived from :meth:`ActionEncoding.mask`:
a flat ``int8`` vector (Gymnasium's ``Discrete.sample(mask=...)``, PettingZoo's
``action_mask``, sb3-contrib's ``action_masks()``), and the factored tuple
``(intervene[2], target[T], strategy[S])`` from :meth:`ActionEncoding.factored_mask`.
Marginalising a distribution over the flat actions gives the speak probability and the
target and strategy rankings that the static tasks score.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Literal, Sequence

import numpy as np

from rescue_env.data.schema import GROUP_LABELS, Scenario
from rescue_env.taxonomy.labels import strategies

TargetKind = Literal["individual", "dyad", "group"]

#: Largest group per scenario unless configured otherwise (DESIGN.md §1: families of 3-6).
DEFAULT_MAX_MEMBERS: dict[str, int] = {"couple": 2, "family": 6}


@dataclass(frozen=True, slots=True)
class TargetOption:
    """One target option: the member slots it addresses and its kind."""

    index: int
    slots: tuple[int, ...]
    kind: TargetKind


@dataclass(frozen=True, slots=True)
class Decision:
    """A decoded action. ``target`` and ``strategy`` are ``None`` when not intervening."""

    intervene: bool
    target: int | None = None
    strategy: int | None = None


class ActionEncoding:
    """Flat action encoding for one scenario and group-size cap.

    >>> enc = ActionEncoding("couple")
    >>> enc.n_actions, enc.n_targets, enc.n_strategies
    (31, 3, 10)
    >>> enc.decode(enc.encode(2, 4))
    Decision(intervene=True, target=2, strategy=4)
    """

    def __init__(self, scenario: Scenario | str, max_members: int | None = None):
        if scenario not in GROUP_LABELS:
            raise ValueError(f"unknown scenario {scenario!r}: expected 'couple' or 'family'")
        self.scenario: Scenario = scenario  # type: ignore[assignment]
        default = DEFAULT_MAX_MEMBERS[scenario]
        self.max_members = default if max_members is None else int(max_members)
        if scenario == "couple" and not 2 <= self.max_members <= 3:
            # the release's "couple" is the kind of relationship: some have three partners
            raise ValueError(f"couple max_members must be 2 or 3 (partners), got {self.max_members}")
        if scenario == "family" and not 2 <= self.max_members <= 8:
            raise ValueError(f"family max_members must be within 2..8, got {self.max_members}")
        self.strategy_names: tuple[str, ...] = strategies(scenario)
        options: list[TargetOption] = [TargetOption(i, (i,), "individual") for i in range(self.max_members)]
        if self.max_members > 2:
            for pair in combinations(range(self.max_members), 2):
                options.append(TargetOption(len(options), pair, "dyad"))
        options.append(TargetOption(len(options), tuple(range(self.max_members)), "group"))
        self.targets: tuple[TargetOption, ...] = tuple(options)
        self._by_slots = {o.slots: o.index for o in options if o.kind != "group"}
        # sizes are plain attributes: decode() runs on every env step
        self.n_targets: int = len(self.targets)
        self.n_strategies: int = len(self.strategy_names)
        self.n_actions: int = 1 + self.n_targets * self.n_strategies

    @property
    def group_target(self) -> int:
        """Index of the whole-group option."""
        return self.n_targets - 1

    # encode / decode -----------------------------------------------------------------------
    def encode(self, target: int, strategy: int) -> int:
        """Flat action for speaking to ``target`` with ``strategy``."""
        if not 0 <= target < self.n_targets:
            raise ValueError(f"target option {target} out of range 0..{self.n_targets - 1}")
        if not 0 <= strategy < self.n_strategies:
            raise ValueError(f"strategy {strategy} out of range 0..{self.n_strategies - 1}")
        return 1 + target * self.n_strategies + strategy

    def decode(self, action: int) -> Decision:
        """Decision for a flat action; raises ``ValueError`` outside ``0..n_actions-1``."""
        a = int(action)
        if not 0 <= a < self.n_actions:
            raise ValueError(f"action {action} out of range 0..{self.n_actions - 1} for {self.scenario}")
        if a == 0:
            return Decision(False)
        t, s = divmod(a - 1, self.n_strategies)
        return Decision(True, t, s)

    def strategy_index(self, name: str) -> int:
        """Index of a strategy label; ``ValueError`` names the valid labels."""
        try:
            return self.strategy_names.index(name)
        except ValueError:
            raise ValueError(
                f"strategy {name!r} is not a {self.scenario} strategy; expected one of {list(self.strategy_names)}"
            ) from None

    # targets <-> members ---------------------------------------------------------------------
    def target_slots(self, target: int, n_present: int) -> tuple[int, ...]:
        """Member slots addressed by ``target`` in a group of ``n_present`` members."""
        option = self.targets[target]
        if option.kind == "group":
            return tuple(range(n_present))
        return option.slots

    def target_for_slots(self, slots: Sequence[int], n_present: int) -> int:
        """Target option addressing exactly ``slots``; the whole group when they cover it.

        Subgroups larger than a dyad (families) map to the whole group, the coarsest option.
        """
        unique = tuple(sorted(set(int(s) for s in slots)))
        if not unique or len(unique) >= n_present or len(unique) > 2:
            return self.group_target
        return self._by_slots[unique]

    def target_label(self, target: int, members: Sequence[str]) -> list[str]:
        """Benchmark-style ``target`` list: a name, a dyad's names, or the group label."""
        option = self.targets[target]
        if option.kind == "group" or (option.kind == "dyad" and len(members) == 2):
            return [GROUP_LABELS[self.scenario]]
        return [members[s] for s in option.slots]

    # masks -----------------------------------------------------------------------------------
    def target_mask(self, n_present: int) -> np.ndarray:
        """``int8[T]``: 1 where a target option addresses only present members."""
        if not 1 <= n_present <= self.max_members:
            raise ValueError(f"group of {n_present} members does not fit max_members={self.max_members}")
        mask = np.zeros(self.n_targets, dtype=np.int8)
        for o in self.targets:
            if o.kind == "group":
                mask[o.index] = 1
            elif o.kind == "individual":
                mask[o.index] = int(o.slots[0] < n_present)
            else:
                mask[o.index] = int(n_present > 2 and max(o.slots) < n_present)
        return mask

    def mask(self, n_present: int, *, allow_intervene: bool = True) -> np.ndarray:
        """Flat ``int8[n_actions]`` mask; listening (action 0) is always allowed."""
        tmask = self.target_mask(n_present) if allow_intervene else np.zeros(self.n_targets, dtype=np.int8)
        flat = np.repeat(tmask, self.n_strategies)
        return np.concatenate([np.ones(1, dtype=np.int8), flat]).astype(np.int8)

    def factored_mask(self, n_present: int, *, allow_intervene: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(intervene[2], target[T], strategy[S])`` masks for factored action heads."""
        intervene = np.array([1, int(allow_intervene)], dtype=np.int8)
        return intervene, self.target_mask(n_present), np.ones(self.n_strategies, dtype=np.int8)

    # marginals -------------------------------------------------------------------------------
    def marginals(self, probs: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """``(p_speak, p_target[T], p_strategy[S])`` from a distribution over flat actions.

        Target and strategy marginals are conditional on speaking (renormalised); uniform
        when the speak mass is zero.
        """
        p = np.asarray(probs, dtype=np.float64).reshape(-1)
        if p.shape[0] != self.n_actions:
            raise ValueError(f"expected {self.n_actions} action probabilities, got {p.shape[0]}")
        grid = p[1:].reshape(self.n_targets, self.n_strategies)
        speak = float(grid.sum())
        if speak <= 0:
            return 0.0, np.full(self.n_targets, 1 / self.n_targets), np.full(self.n_strategies, 1 / self.n_strategies)
        return speak, grid.sum(axis=1) / speak, grid.sum(axis=0) / speak
