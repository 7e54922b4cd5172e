"""Heterogeneous clients and the observation model (issue 12): the population fit, the
``heterogeneity`` knob, determinism (the held-out fidelity targets are in
test_dynamics_fidelity.py, on the three real slices, folds by group)."""

from __future__ import annotations

import numpy as np
import pytest

from rescue_env.dynamics import CalibratedModel, DynamicsParams, TherapistMove
from rescue_env.dynamics.fit import EffectRecord, fit_population
from rescue_env.envs.gym_env import GroupSupportEnv
from rescue_env.state import GroupState, StateTracker
from rescue_env.taxonomy.labels import strategies


def _state(scenario: str) -> GroupState:
    members = ["A", "B"] if scenario == "couple" else ["A", "B", "C"]
    st = StateTracker(scenario, members).state.copy()
    st.distress = np.full(len(members), 0.5)
    st.stance = np.full((len(members), len(members)), -0.3)
    np.fill_diagonal(st.stance, 0.0)
    return st


def _observed_changes(scenario: str, h: float, draws: int = 4000) -> np.ndarray:
    model = CalibratedModel(scenario, heterogeneity=h)
    s = strategies(scenario).index("reframe")
    st = _state(scenario)
    seen, _ = model.simulate(st, TherapistMove(True, None, (0,), s, "reframe"), draws, np.random.default_rng(0), observed=True)
    return seen[:, 0] - 0.5


@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_heterogeneity_zero_is_the_mean_client_and_more_widens(scenario):
    """h = 0: every client has the mean traits (multipliers 1, offsets 0) and the spread is the mean client's
    moment-to-moment noise; the spread of a move's outcome grows with h."""
    sds = {h: float(np.std(_observed_changes(scenario, h))) for h in (0.0, 1.0, 3.0)}
    assert sds[0.0] > 0.05  # even the mean client is not deterministic (reading noise)
    assert sds[0.0] < sds[1.0] < sds[3.0]
    env = GroupSupportEnv(scenario, heterogeneity=0.0)
    env.reset(seed=3)
    traits = env.core.traits(0)
    for name in ("reactivity", "volatility", "susceptibility"):
        np.testing.assert_array_equal(traits[name], 1.0)
    for name in ("baseline", "warmth"):
        np.testing.assert_array_equal(traits[name], 0.0)
    env = GroupSupportEnv(scenario, heterogeneity=1.0)
    env.reset(seed=3)
    traits = env.core.traits(0)
    assert not np.allclose(traits["reactivity"], 1.0) and np.all(traits["volatility"] > 0)


def test_backfiring_clients_exist_at_the_fitted_spread():
    """Reactivity's sign can flip: some simulated clients are made worse by a calming move."""
    model = CalibratedModel("couple")
    core = model._core(2, 2000)
    st = _state("couple")
    for e in range(2000):
        core.load(e, st, key=e)
    assert 0.01 < np.mean(core.state.traits[:, 0, 0] < 0) < 0.5


def test_traits_are_drawn_from_the_episode_key():
    """Same seed, same clients and same episode; another seed, other clients."""

    def run(seed):
        env = GroupSupportEnv("couple", horizon=6)
        obs, _ = env.reset(seed=seed)
        traits = env.core.traits(0)
        seen = [obs["distress"].copy()]
        for a in (3, 0, 5, 0, 7, 0):
            obs, *_ = env.step(a)
            seen.append(obs["distress"].copy())
        return traits, np.array(seen)

    t1, o1 = run(11)
    t2, o2 = run(11)
    t3, _ = run(12)
    for k in t1:
        np.testing.assert_array_equal(t1[k], t2[k])
    np.testing.assert_array_equal(o1, o2)
    assert not np.allclose(t1["reactivity"], t3["reactivity"])


def test_a_bad_heterogeneity_is_refused():
    with pytest.raises(ValueError, match="heterogeneity"):
        GroupSupportEnv("couple", heterogeneity=-1.0)
    with pytest.raises(ValueError, match="heterogeneity"):
        GroupSupportEnv("couple", heterogeneity=float("nan"))


def test_population_fit_recovers_known_spreads():
    """Synthetic clients with a known client-offset sd and moment sd: the empirical-Bayes fit
    finds them (mean effects 0, so residuals are the draws themselves)."""
    rng = np.random.default_rng(0)
    tau, sigma = 0.1, 0.2
    records = []
    for c in range(150):
        u = tau * rng.standard_normal()
        for _ in range(6):
            delta = u + sigma * rng.standard_normal()
            records.append(EffectRecord(f"d{c}", 0, 0, 0.5, 0.5 + delta, 2, 1, 0))
    fit = fit_population(records, np.full((1, 1), 0.05), 0.8, 0.55)["fit"]
    assert fit["client_offset_sd"] == pytest.approx(tau, rel=0.3)
    assert fit["moment_sd"] == pytest.approx(sigma, rel=0.1)


def test_default_parameters_carry_the_population():
    params = DynamicsParams.load()
    for scenario in ("couple", "family"):
        sp = params[scenario]
        assert sp.reading_noise > 0.05 and sp.reactivity_sd > 0 and sp.volatility_sd > 0
        assert params.provenance["scenarios"][scenario]["client_population"]["converged"]
