"""Client dynamics: the client-model interface, the calibrated model's statement, parameters and
fitting (its arithmetic is the simulator core's, :mod:`rescue_env.core`)."""

from rescue_env.dynamics.base import TO_GROUP, TO_THERAPIST, Behaviour, ClientBackend, ClientTurn, TherapistMove
from rescue_env.dynamics.calibrated import CalibratedModel
from rescue_env.dynamics.params import DynamicsParams, ScenarioParams
from rescue_env.dynamics.text import TextBank

__all__ = [
    "TO_GROUP",
    "TO_THERAPIST",
    "Behaviour",
    "CalibratedModel",
    "ClientBackend",
    "ClientTurn",
    "DynamicsParams",
    "ScenarioParams",
    "TextBank",
    "TherapistMove",
]
