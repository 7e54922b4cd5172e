"""Parameters of the calibrated client model, versioned and stored as JSON with provenance.

A :class:`DynamicsParams` holds one :class:`ScenarioParams` per scenario plus provenance
(which data, how many transitions behind each estimate, how priors were mixed in).
``rescue calibrate`` writes one; the package ships ``default_params.json`` beside this
module, fitted on the bundled seeds and the real RESCUE-BENCH subset with the priors of
:mod:`rescue_env.dynamics.priors`.

Array shapes (P = patterns of the scenario, the extra last state is "no clear pattern";
S = strategies; U = utterance types):

- ``transition[S+1, P+1, P+1]``: next-pattern probabilities given the therapist's move
  (index 0 = kept listening, ``1+s`` = strategy ``s``) and the current pattern;
- ``effect[P+1, S]``: mean change of a targeted member's distress per step;
- ``effect_sd[P+1, S]``: sd of that change from move to move beyond the population's
  (reading noise, client offsets), drawn per addressed member and move;
- ``pattern_pressure[P+1]``: drift of everyone's distress in a pattern;
- ``harden[P+1]``: per-step pull of stances toward −1 (negative: toward +1);
- ``soften[S]``: pull of the addressed member's stances toward +1 per strategy;
- ``second_turn[P+1]``: probability that a second client speaks in a step;
- ``utterance[P+1, U]``: client utterance-type probabilities;
- ``utterance_effect[U, 2]``: (distress, stance) change of the member addressed by a client.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from rescue_env.atomic import atomic_write_text
from rescue_env.taxonomy.labels import UTTERANCE_TYPES, patterns, strategies

PARAMS_VERSION = 1
DEFAULT_PARAMS_FILE = "default_params.json"


@dataclass
class ScenarioParams:
    """Calibrated client dynamics of one scenario (see the module docstring for shapes)."""

    scenario: str
    patterns: list[str]
    strategies: list[str]
    transition: np.ndarray
    effect: np.ndarray
    pattern_pressure: np.ndarray
    harden: np.ndarray
    soften: np.ndarray
    second_turn: np.ndarray
    utterance: np.ndarray
    utterance_effect: np.ndarray
    #: share of a strategy's effect that reaches each member of a dyad / the whole group.
    dyad_share: float = 0.8
    group_share: float = 0.55
    #: untended members' distress grows by this fraction of itself per step (bucket effect).
    untended_growth: float = 0.03
    #: extra distress of the worst-off member when the therapist addresses only others.
    sideline_penalty: float = 0.02
    #: distress flows from j to i at this rate times the hostility of their edge (ripple).
    contagion: float = 0.2
    #: effect multiplier per consecutive intervention (clients need room to speak).
    fatigue: float = 0.6
    distress_noise: float = 0.02
    stance_noise: float = 0.01
    #: logits of who speaks next: being addressed by the therapist, own distress.
    speak_addressed: float = 1.5
    speak_distress: float = 2.0
    #: probability that an addressed client answers the therapist (else another member).
    answer_therapist: float = 0.6
    #: client population (drawn per client at reset, scaled by ``dynamics.heterogeneity``):
    #: sd of the reactivity multiplier on strategy effects (mean 1; below 0 a move backfires),
    #: log-sd of volatility (scales distress and reading noise), log-sd of contagion
    #: susceptibility (scales the ripple a client takes in).
    reactivity_sd: float = 0.0
    volatility_sd: float = 0.0
    susceptibility_sd: float = 0.0
    #: sd of a client's baseline distress (their level's offset from the seed person's at a
    #: reset, mean 0), and of a dyad's warmth (a lasting drift of i's stance toward j per step,
    #: per ordered pair, mean 0). Files written before they existed load with 0 (no spread).
    baseline_sd: float = 0.0
    warmth_sd: float = 0.0
    #: sd of the annotated (observed) intensity around latent distress (observation model).
    reading_noise: float = 0.0
    #: ``[P+1, S]`` per-(pattern, strategy) sd of a move's effect (see the module docstring);
    #: ``None``: zeros (files written before it existed).
    effect_sd: np.ndarray | None = None

    def __post_init__(self) -> None:
        p1, s = len(self.patterns) + 1, len(self.strategies)
        if self.effect_sd is None:
            self.effect_sd = np.zeros((p1, s))
        expected = {
            "transition": (s + 1, p1, p1),
            "effect": (p1, s),
            "effect_sd": (p1, s),
            "pattern_pressure": (p1,),
            "harden": (p1,),
            "soften": (s,),
            "second_turn": (p1,),
            "utterance": (p1, len(UTTERANCE_TYPES)),
            "utterance_effect": (len(UTTERANCE_TYPES), 2),
        }
        for name, shape in expected.items():
            arr = np.asarray(getattr(self, name), dtype=np.float64)
            if arr.shape != shape:
                raise ValueError(f"{self.scenario} parameter {name!r} has shape {arr.shape}, expected {shape}")
            setattr(self, name, arr)
        if list(self.patterns) != list(patterns(self.scenario)) or list(self.strategies) != list(strategies(self.scenario)):
            raise ValueError(f"{self.scenario} parameters were fitted for other label sets; refit with `rescue calibrate`")
        if not np.allclose(self.transition.sum(axis=2), 1.0, atol=1e-6):
            raise ValueError(f"{self.scenario} transition rows must sum to 1")
        if not np.allclose(self.utterance.sum(axis=1), 1.0, atol=1e-6):
            raise ValueError(f"{self.scenario} utterance rows must sum to 1")
        for name in ("reactivity_sd", "volatility_sd", "susceptibility_sd", "baseline_sd", "warmth_sd"):
            value = float(getattr(self, name))
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{self.scenario} {name} must be finite and >= 0, got {value!r}")
        if np.any(self.effect_sd < 0) or not np.all(np.isfinite(self.effect_sd)):
            raise ValueError(f"{self.scenario} effect_sd must be finite and >= 0")

    @property
    def pattern_states(self) -> list[str | None]:
        return [*self.patterns, None]

    def pattern_index(self, pattern: str | None) -> int:
        """Index of a pattern state (unknown labels map to "no clear pattern")."""
        try:
            return self.patterns.index(pattern) if pattern else len(self.patterns)
        except ValueError:
            return len(self.patterns)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for k, v in out.items():
            if isinstance(v, np.ndarray):
                out[k] = np.round(v, 6).tolist()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScenarioParams:
        return cls(**{k: (np.asarray(v) if isinstance(v, list) and k not in ("patterns", "strategies") else v) for k, v in data.items()})


@dataclass
class DynamicsParams:
    """Both scenarios' parameters plus provenance; JSON round-trips exactly."""

    scenarios: dict[str, ScenarioParams]
    provenance: dict[str, Any] = field(default_factory=dict)
    version: int = PARAMS_VERSION

    def __getitem__(self, scenario: str) -> ScenarioParams:
        try:
            return self.scenarios[scenario]
        except KeyError:
            raise KeyError(f"no dynamics parameters for scenario {scenario!r}; have {sorted(self.scenarios)}") from None

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "provenance": self.provenance,
            "scenarios": {k: v.to_dict() for k, v in self.scenarios.items()},
        }

    def save(self, path: str | Path) -> Path:
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out, json.dumps(self.to_dict(), indent=1) + "\n")
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DynamicsParams:
        version = data.get("version")
        if version != PARAMS_VERSION:
            raise ValueError(f"dynamics parameters version {version!r} not supported (expected {PARAMS_VERSION}); refit with `rescue calibrate`")
        return cls(
            scenarios={k: ScenarioParams.from_dict(v) for k, v in data["scenarios"].items()},
            provenance=data.get("provenance", {}),
            version=version,
        )

    @classmethod
    def load(cls, path: str | Path | None = None) -> DynamicsParams:
        """Load parameters from ``path``; the packaged defaults when ``None``."""
        if path is None:
            text = resources.files("rescue_env.dynamics").joinpath(DEFAULT_PARAMS_FILE).read_text(encoding="utf-8")
        else:
            p = Path(path)
            if not p.exists():
                raise FileNotFoundError(f"dynamics parameter file {p} does not exist (write one with `rescue calibrate`)")
            text = p.read_text(encoding="utf-8")
        return cls.from_dict(json.loads(text))


def scenario_params(params: DynamicsParams | ScenarioParams | str | None, scenario: str) -> ScenarioParams:
    """The calibrated parameters of ``scenario``: from an object, a parameter file, or the
    packaged defaults (``None``)."""
    if isinstance(params, ScenarioParams):
        sp = params
    else:
        dp = params if isinstance(params, DynamicsParams) else DynamicsParams.load(params)
        sp = dp[scenario]
    if sp.scenario != scenario:
        raise ValueError(f"parameters are for {sp.scenario!r}, the env is for {scenario!r}")
    return sp
