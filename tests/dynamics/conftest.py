"""Fixtures of the dynamics tests: fixed parameters and hand-built group states."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

from rescue_env.dynamics import ScenarioParams
from rescue_env.dynamics.fit import prior_params
from rescue_env.state import GroupState


@pytest.fixture(scope="session")
def priors_only():
    """Parameters from the clinical priors alone (no data): fixed, independent of the
    shipped defaults."""
    return prior_params()


@pytest.fixture
def fixed_params(priors_only) -> Callable[..., ScenarioParams]:
    """``fixed_params(scenario, quiet=..., sticky=..., isolate=..., **overrides)``.

    ``quiet``: no noise, and every client the mean client (no trait spread, no reading noise). ``sticky``: the pattern never changes (identity transitions).
    ``isolate``: switch off every mechanism except the ones re-enabled by ``overrides``
    (utterance effects, contagion, untended growth, pattern pressure, hardening,
    sidelining).
    """

    def _make(scenario: str, *, quiet: bool = True, sticky: bool = False, isolate: bool = False, **overrides) -> ScenarioParams:
        base = priors_only[scenario]
        kw: dict = {}
        if quiet:
            kw.update(distress_noise=0.0, stance_noise=0.0, reactivity_sd=0.0, volatility_sd=0.0, susceptibility_sd=0.0, reading_noise=0.0,
                      baseline_sd=0.0, warmth_sd=0.0)  # fmt: skip
        if sticky:
            kw["transition"] = np.tile(np.eye(base.transition.shape[1]), (base.transition.shape[0], 1, 1))
        if isolate:
            kw.update(
                utterance_effect=np.zeros_like(base.utterance_effect),
                contagion=0.0,
                untended_growth=0.0,
                pattern_pressure=np.zeros_like(base.pattern_pressure),
                harden=np.zeros_like(base.harden),
                sideline_penalty=0.0,
                effect=np.zeros_like(base.effect),
                soften=np.zeros_like(base.soften),
            )
        kw.update(overrides)
        return replace(base, **kw)

    return _make


@pytest.fixture
def make_state() -> Callable[..., GroupState]:
    """``make_state(scenario, distress, stance, pattern)``: a state with the given
    distress vector and stance matrix (a scalar stance fills every off-diagonal edge)."""

    def _make(scenario: str, distress, stance, pattern: str | None) -> GroupState:
        d = np.asarray(distress, dtype=float)
        n = len(d)
        g = np.full((n, n), float(stance)) if np.isscalar(stance) else np.asarray(stance, dtype=float)
        np.fill_diagonal(g, 0.0)
        return GroupState(
            scenario=scenario,
            members=tuple(f"m{i}" for i in range(n)),
            distress=d.copy(),
            intensity=np.full(n, 5.0),
            emotion=[""] * n,
            stance=g,
            pattern=pattern,
            untended=np.zeros(n, dtype=np.int64),
        )

    return _make
