"""The client-backend interface shared by the calibrated and LLM client models.

A backend answers the therapist's move: after the calibrated transition (the simulator core)
it says which clients spoke and how (:class:`ClientTurn`), and may set the speakers' distress
and stances (:class:`ClientBackend`). The :class:`~rescue_env.session.Session`
turns those turns into benchmark rows, so every backend produces the same output shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from rescue_env.session import Session

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


@runtime_checkable
class ClientBackend(Protocol):
    """How clients respond: the calibrated model (:class:`~rescue_env.dynamics.calibrated.CalibratedModel`)
    or LLM personas (:class:`~rescue_env.llm.backend.LLMBackend`). The envs run the calibrated
    transition first (who speaks, the drift of the silent members, the pattern draw), then
    ask the backend for the speakers' answers."""

    name: str

    async def arespond(
        self,
        session: Session,
        move: TherapistMove,
        planned: list[ClientTurn],
        *,
        pattern_before: str | None,
        seed: int,
        behaviours: dict[int, Behaviour | None] | None = None,
    ) -> list[ClientTurn]:
        """The client turns of the step. ``session.state`` holds the state the calibrated
        transition reached and ``planned`` its turns; a backend may overwrite the speakers'
        distress and stances (and the pattern) in ``session.state``, in place. ``move`` is the
        therapist's move, ``pattern_before`` the pattern it met, ``seed`` seeds the step's
        random calls, ``behaviours`` (multi-agent view) fixes the turns of the client slots
        it names (``None``: silent)."""
        ...
