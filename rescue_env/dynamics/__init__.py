"""Client dynamics: the backend interface, the calibrated model, its parameters and fitting."""

from rescue_env.dynamics.base import TO_GROUP, TO_THERAPIST, Behaviour, ClientBackend, ClientTurn, TherapistMove
from rescue_env.dynamics.calibrated import CalibratedBackend
from rescue_env.dynamics.params import DynamicsParams, ScenarioParams
from rescue_env.dynamics.text import TextBank

__all__ = [
    "TO_GROUP",
    "TO_THERAPIST",
    "Behaviour",
    "CalibratedBackend",
    "ClientBackend",
    "ClientTurn",
    "DynamicsParams",
    "ScenarioParams",
    "TextBank",
    "TherapistMove",
]
