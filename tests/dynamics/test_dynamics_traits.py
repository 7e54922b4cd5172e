"""Baseline distress and per-dyad warmth: drawn at reset from the episode key,
neutral at ``heterogeneity`` 0, acting where the model says, fitted from data by
empirical Bayes (spreads recovered from synthetic data of a known spread)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rescue_env.dynamics import CalibratedModel, DynamicsParams
from rescue_env.dynamics.fit import PopulationPrior, StanceRecord, fit_baseline, fit_warmth
from rescue_env.envs.gym_env import GroupSupportEnv


def _traits_of_many(scenario: str, params, h: float, sessions: int, make_state, seed0: int = 0):
    n = 2 if scenario == "couple" else 3
    model = CalibratedModel(scenario, params, heterogeneity=h)
    core = model._core(n, sessions)
    st = make_state(scenario, [0.5] * n, 0.0, None)
    for e in range(sessions):
        core.load(e, st, key=seed0 + e)
    return core, n


@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_heterogeneity_zero_gives_neutral_baseline_and_warmth_and_the_seed_start(scenario):
    """h = 0: baseline and warmth are 0 and a reset starts at the seed's own distress; h = 1
    moves the start by exactly the drawn baseline (clipped to [0, 1])."""
    for h in (0.0, 1.0):
        env = GroupSupportEnv(scenario, heterogeneity=h)
        for seed in range(5):
            env.reset(seed=seed)
            traits = env.core.traits(0)
            n = len(traits["baseline"])
            start = env.core.start_of(0)[3]
            if h == 0.0:
                np.testing.assert_array_equal(traits["baseline"], 0.0)
                np.testing.assert_array_equal(traits["warmth"], 0.0)
            else:
                assert np.all(traits["baseline"] != 0.0)
                assert np.all(traits["warmth"][~np.eye(n, dtype=bool)] != 0.0)
                np.testing.assert_array_equal(np.diag(traits["warmth"]), 0.0)
            np.testing.assert_allclose(env.core.state.distress[0, :n], np.clip(start.distress + traits["baseline"], 0.0, 1.0), atol=1e-12)
            # the session's state (what LLM clients and infos see) is the live start
            np.testing.assert_allclose(env.session.state.distress, env.core.state.distress[0, :n], atol=1e-12)


@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_traits_are_deterministic_per_key_and_spread_as_fitted(scenario, make_state):
    """Same key, same baseline and warmth; across keys their sd is the fitted spread times h,
    and the new draws do not reuse the older traits' draws (independent of reactivity)."""
    params = DynamicsParams.load()[scenario]
    assert params.baseline_sd > 0 and params.warmth_sd > 0
    for h in (1.0, 2.0):
        core, n = _traits_of_many(scenario, params, h, 4000, make_state)
        base = core.state.traits[:, :n, 3]
        warm = np.stack([core.traits(e)["warmth"] for e in range(4000)])
        off = warm[:, ~np.eye(n, dtype=bool)]
        assert base.std() == pytest.approx(h * params.baseline_sd, rel=0.05)
        assert off.std() == pytest.approx(h * params.warmth_sd, rel=0.05)
        assert abs(base.mean()) < 0.05 * h * params.baseline_sd + 3 * h * params.baseline_sd / np.sqrt(base.size)
        # independent draws: no correlation with reactivity, nor between the two directions of a dyad
        assert abs(np.corrcoef(base[:, 0], core.state.traits[:, 0, 0])[0, 1]) < 0.06
        assert abs(np.corrcoef(warm[:, 0, 1], warm[:, 1, 0])[0, 1]) < 0.06
    again, _ = _traits_of_many(scenario, params, 2.0, 50, make_state)
    np.testing.assert_array_equal(again.state.traits[:50], core.state.traits[:50])
    other, _ = _traits_of_many(scenario, params, 2.0, 50, make_state, seed0=10_000)
    assert not np.allclose(other.state.traits[:50, :n, 3], core.state.traits[:50, :n, 3])


def test_an_edges_warmth_moves_that_edges_stance(fixed_params, make_state):
    """Every other mechanism off: edge i→j's stance drifts by exactly w_ij per step (the
    reverse edge by its own w_ji); with stance noise and the full model on, the edge's change
    over an episode still follows its own warmth, not the reverse edge's."""
    steps = 10
    params = fixed_params("couple", isolate=True, sticky=True, warmth_sd=0.02)
    core, n = _traits_of_many("couple", params, 1.0, 200, make_state)
    for _ in range(steps):
        core.transition(np.zeros(200, np.int64))
    w = np.stack([core.traits(e)["warmth"] for e in range(200)])
    np.testing.assert_allclose(core.state.stance[:, 0, 1], steps * w[:, 0, 1], atol=1e-12)
    np.testing.assert_allclose(core.state.stance[:, 1, 0], steps * w[:, 1, 0], atol=1e-12)
    # the full default model (patterns, utterances, noise), warmth widened to see it in 20 steps
    sp = DynamicsParams.load()["couple"]
    from dataclasses import replace

    for warmth_sd, low in ((0.02, 0.5), (0.0, None)):
        core, n = _traits_of_many("couple", replace(sp, warmth_sd=warmth_sd), 1.0, 1000, make_state)
        g0 = core.state.stance[:, 0, 1].copy()
        rng = np.random.default_rng(0)
        valid = np.flatnonzero(core.mask_table[2])
        for _ in range(20):
            core.transition(rng.choice(valid, 1000).astype(np.int64))
        change = core.state.stance[:, 0, 1] - g0
        w = np.stack([core.traits(e)["warmth"] for e in range(1000)])
        if low is None:
            np.testing.assert_array_equal(w, 0.0)
            continue
        assert np.corrcoef(w[:, 0, 1], change)[0, 1] > low
        assert abs(np.corrcoef(w[:, 1, 0], change)[0, 1]) < 0.15
        warm, cold = change[w[:, 0, 1] > 0.02].mean(), change[w[:, 0, 1] < -0.02].mean()
        assert warm - cold > 0.3


def test_old_parameter_files_load_without_the_new_spreads(tmp_path):
    data = DynamicsParams.load().to_dict()
    for sp in data["scenarios"].values():
        del sp["baseline_sd"], sp["warmth_sd"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    params = DynamicsParams.load(path)
    assert params["couple"].baseline_sd == 0.0 and params["family"].warmth_sd == 0.0
    env = GroupSupportEnv("couple", params=str(path))
    env.reset(seed=0)
    np.testing.assert_array_equal(env.core.traits(0)["baseline"], 0.0)
    np.testing.assert_array_equal(env.core.traits(0)["warmth"], 0.0)
    assert env.core.traits(0)["reactivity"].std() > 0  # the older traits still spread


def test_baseline_fit_recovers_a_known_between_client_spread():
    """Synthetic readings: client levels of sd 0.2 around 0.5, readings of sd 0.15 around
    them; the prior's median (0.1) is far from the truth, so the data must find it."""
    rng = np.random.default_rng(1)
    for tau in (0.2, 0.05):
        levels = []
        for c in range(200):
            b = 0.5 + tau * rng.standard_normal()
            levels += [(f"c{c}", b + 0.15 * rng.standard_normal()) for _ in range(rng.integers(4, 12))]
        fit = fit_baseline(levels)
        assert fit["converged"]
        assert fit["tau"] == pytest.approx(tau, rel=0.2)
        assert fit["sigma"] == pytest.approx(0.15, rel=0.1)


def test_warmth_fit_recovers_a_known_between_dyad_spread():
    """Synthetic stance changes: a random walk per dyad with drift w ~ N(0, τ²) per step over
    1–3 steps, the pattern's pull added; the prior's median (0.02) is far from both truths."""
    sp = DynamicsParams.load()["couple"]
    rng = np.random.default_rng(2)
    for tau in (0.08, 0.006):
        records = []
        for dyad in range(400):
            w = tau * rng.standard_normal()
            for _ in range(8):
                p = int(rng.integers(0, len(sp.harden)))
                h = sp.harden[p]
                toward, rate = (-1.0, h) if h >= 0 else (1.0, -h)
                k = int(rng.integers(1, 4))
                before = float(rng.uniform(-0.8, 0.8))
                after = before + k * rate * (toward - before) + k * w + 0.05 * np.sqrt(k) * rng.standard_normal()
                records.append(StanceRecord(f"d{dyad}", p, before, after, k))
        fit = fit_warmth(records, sp, PopulationPrior())
        assert fit["converged"]
        assert fit["tau"] == pytest.approx(tau, rel=0.25)
        assert fit["sigma"] == pytest.approx(0.05, rel=0.1)
