"""The therapist-agent protocol shared by environments, rollouts and the static tasks.

An agent does two things:

- ``act(observation, action_mask, state)`` → a flat action of the scenario's
  :class:`~rescue_env.taxonomy.ActionEncoding` (0 = keep listening), respecting the mask;
- ``rank(state, encoding)`` → a :class:`Ranking`: the probability of speaking now and
  distributions over target options and strategies, which the static tasks turn into
  ITP predictions and STP/SSP top-3 lists.

``state`` is the :class:`~rescue_env.state.GroupState` behind the observation (environments
expose it in ``info["state"]``); agents that only read the observation ignore it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from rescue_env.state import GroupState
from rescue_env.taxonomy.actions import ActionEncoding



class PriorError(ValueError):
    """A behaviour prior that cannot serve: its file is missing or is not a prior file of this
    version, or the prior was fitted on other scenarios than the run plays. A user error (the
    apps exit 2 with the message, which names the fix)."""


class PriorFileNotFound(PriorError, FileNotFoundError):
    """The behaviour prior file named does not exist (also a ``FileNotFoundError``)."""


class PolicyError(ValueError):
    """A trained policy that cannot act here: its file is missing or is no saved model, or it
    was trained for another scenario, group cap or observation layout. A user error (the
    apps exit 2 with the message, which names the fix)."""


class PolicyFileNotFound(PolicyError, FileNotFoundError):
    """The policy file named does not exist (also a ``FileNotFoundError``)."""

@dataclass(frozen=True)
class Ranking:
    """An agent's view of what to do next in a state.

    ``target_probs`` is indexed by the encoding's target options, ``strategy_probs`` by its
    strategies; both conditional on speaking and summing to 1 over valid entries.
    """

    p_speak: float
    target_probs: np.ndarray
    strategy_probs: np.ndarray

    def top_targets(self, encoding: ActionEncoding, members: list[str] | tuple[str, ...], k: int = 3) -> list[list[str]]:
        """The ``k`` most likely target options as benchmark ``target`` lists (valid only)."""
        valid = encoding.target_mask(len(members)).astype(bool)
        order = [int(t) for t in np.argsort(-self.target_probs, kind="stable") if valid[t]]
        return [encoding.target_label(t, list(members)) for t in order[:k]]

    def top_strategies(self, encoding: ActionEncoding, k: int = 3) -> list[str]:
        """The ``k`` most likely strategy labels."""
        order = np.argsort(-self.strategy_probs, kind="stable")
        return [encoding.strategy_names[int(s)] for s in order[:k]]


@runtime_checkable
class TherapistAgent(Protocol):
    """What every therapist policy provides. ``name`` labels it in reports."""

    name: str

    def reset(self, *, seed: int | None = None) -> None:
        """Start a new episode (agents with memory clear it; seeded agents reseed)."""

    def act(self, observation: Any, action_mask: np.ndarray, state: GroupState | None = None) -> int:
        """A flat action allowed by ``action_mask`` (an ``int8`` vector)."""

    def rank(self, state: GroupState, encoding: ActionEncoding) -> Ranking:
        """Speak probability and target/strategy distributions for ``state``."""
