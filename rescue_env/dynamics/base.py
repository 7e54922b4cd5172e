"""The client-backend interface shared by the calibrated and LLM client models.

A backend moves the group state one step in response to the therapist's move and says
which clients spoke and how (:class:`ClientTurn`). The :class:`~rescue_env.session.Session`
turns those turns into benchmark rows, so every backend produces the same output shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from rescue_env.state import GroupState

#: ``ClientTurn.addressee`` / ``Behaviour.addressee`` value meaning the therapist.
TO_THERAPIST = -1
#: ``addressee`` value meaning the whole group.
TO_GROUP = -2


@dataclass(slots=True)
class TherapistMove:
    """The therapist's decision as the backend sees it (z_t, A_t, a_t)."""

    intervene: bool
    target: int | None = None
    slots: tuple[int, ...] = ()
    strategy: int | None = None
    strategy_name: str | None = None
    text: str = ""


@dataclass(slots=True)
class Behaviour:
    """A client's action in the multi-agent view: an utterance type toward an addressee
    (a member slot, :data:`TO_THERAPIST` or :data:`TO_GROUP`), or silence (``None`` in place
    of a Behaviour)."""

    utterance_type: int
    addressee: int = TO_THERAPIST


@dataclass(slots=True)
class ClientTurn:
    """One client row produced by a step.

    ``emotion``/``intensity`` and ``stances`` are self-reports where the backend has them
    (LLM clients); the session derives them from the state otherwise.
    """

    slot: int
    utterance_type: str
    addressee: int = TO_THERAPIST
    text: str = ""
    emotion: str | None = None
    intensity: float | None = None
    stances: list[tuple[int, str, str]] = field(default_factory=list)


class ClientBackend(Protocol):
    """How clients respond. Implementations mutate ``state`` in place (distress, stance,
    pattern) and return the client turns of the step."""

    name: str

    def step(
        self,
        state: GroupState,
        move: TherapistMove,
        rng: np.random.Generator,
        *,
        streak: int = 0,
        behaviours: dict[int, Behaviour | None] | None = None,
    ) -> list[ClientTurn]:
        """Advance ``state`` by one step. ``streak`` counts the therapist's consecutive
        interventions before this one. ``behaviours`` (multi-agent view) fixes what the
        clients whose slots it contains do (``None`` = silent); the backend's own client
        model drives every other slot."""
