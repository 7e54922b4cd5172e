"""Pattern dwell and per-(pattern, strategy) effect spread (issue 12): the hierarchical
transition fit and its cross-validated strengths, the empirical-Bayes cell spreads, and the
core's per-move draw of them."""

from __future__ import annotations

import numpy as np
import pytest

from rescue_env.dynamics import CalibratedModel, TherapistMove
from rescue_env.dynamics.fit import (
    EffectRecord,
    TransitionStrength,
    choose_transition_strength,
    fit_effect_cells,
    transition_table,
)
from rescue_env.dynamics.priors import transition_prior
from rescue_env.taxonomy.labels import strategies


def _sample_counts(table: np.ndarray, rng: np.random.Generator, transitions: int) -> np.ndarray:
    """Counts of ``transitions`` transitions of one group, each from a random (action, src)
    row of ``table`` (sparse rows, as in real data)."""
    counts = np.zeros_like(table)
    for _ in range(transitions):
        a, i = rng.integers(table.shape[0]), rng.integers(table.shape[1])
        counts[a, i, rng.choice(table.shape[2], p=table[a, i])] += 1
    return counts


def test_no_data_gives_the_prior_for_any_strength():
    prior = transition_prior("couple")
    for st in (TransitionStrength(), TransitionStrength(1, 256, 256, 1)):
        np.testing.assert_allclose(transition_table(np.zeros_like(prior), prior, st), prior, atol=1e-12)


def test_a_pattern_that_holds_under_one_move_holds_longer_under_all():
    """Dwell is learnt per pattern from every move out of it: counts of pursue-withdraw holding
    while the therapist listens raise its stay probability under moves never seen there too,
    and the rows stay distributions with the prior's change shape."""
    prior = transition_prior("couple")
    counts = np.zeros_like(prior)
    counts[0, 0, 0], counts[0, 0, 1] = 60, 2  # pursue-withdraw held 60 of 62 times
    table = transition_table(counts, prior, TransitionStrength(4, 4, 8, 8))
    np.testing.assert_allclose(table.sum(axis=2), 1.0, atol=1e-12)
    assert (table > 0).all()
    for a in range(prior.shape[0]):
        assert table[a, 0, 0] > prior[a, 0, 0] + 0.05
    # other patterns are untouched
    np.testing.assert_allclose(table[:, 1:], prior[:, 1:], atol=1e-12)


def test_cross_validation_trusts_data_that_differ_from_the_prior():
    """Groups drawn from a much stickier table than the prior: held-out groups are best
    predicted with little weight on the prior's stay rates; groups drawn from the prior
    itself: with much."""
    rng = np.random.default_rng(0)
    prior = transition_prior("couple")
    sticky = prior.copy()
    diag = np.arange(prior.shape[1])
    sticky[:, diag, diag] = 0.97
    off = ~np.eye(prior.shape[1], dtype=bool)
    sticky[:, off] = (prior * off / (prior * off).sum(axis=2, keepdims=True) * 0.03)[:, off]
    from_sticky, _ = choose_transition_strength([_sample_counts(sticky, rng, 60) for _ in range(6)], prior)
    from_prior, info = choose_transition_strength([_sample_counts(prior, rng, 60) for _ in range(6)], prior)
    assert from_sticky.stay_pattern <= 4
    assert from_prior.stay_pattern >= 32
    assert info["groups"] == 6
    lone, lone_info = choose_transition_strength([_sample_counts(prior, rng, 60)], prior)
    assert lone == TransitionStrength() and "defaults" in lone_info["method"]


def _records(sds: dict[tuple[int, int], float], n: int, rng: np.random.Generator) -> list[EffectRecord]:
    out = []
    for (p, s), sd in sds.items():
        for k in range(n):
            out.append(EffectRecord(f"d{k % 7}", s, p, 0.5, 0.5 + sd * rng.standard_normal(), 2, 1, 0, f"g{k % 7}:m"))
    return out


def test_cell_spreads_find_the_noisier_cell():
    rng = np.random.default_rng(1)
    effect = np.zeros((3, 2))
    sd, info = fit_effect_cells(_records({(0, 0): 0.1, (1, 0): 0.1, (2, 1): 0.4, (1, 1): 0.1}, 60, rng), effect, 0.8, 0.55)
    assert sd[2, 1] == pytest.approx(0.4, rel=0.2)
    for cell in ((0, 0), (1, 0), (1, 1)):
        assert sd[cell] < 0.2
    assert info["prior_dof_nu0"] < 100  # cells differ: little shrinkage
    # cells alike: much stronger shrinkage, every cell near the pooled sd
    alike = {(p, s): 0.2 for p in range(3) for s in range(2)}
    sd_same, info_same = fit_effect_cells(_records(alike, 12, rng), effect, 0.8, 0.55)
    assert info_same["prior_dof_nu0"] > 3 * info["prior_dof_nu0"]
    assert info_same["pooled_cell_sd_sigma0"] == pytest.approx(0.2, rel=0.15)
    assert np.all(np.abs(np.log(sd_same / info_same["pooled_cell_sd_sigma0"])) < np.log(1.6))
    assert fit_effect_cells([], effect, 0.8, 0.55)[0].sum() == 0


@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_the_core_draws_the_cell_spread_per_move(scenario, fixed_params, make_state):
    """With every other mechanism off, an addressed member's latent change is the cell's mean
    plus a normal of the cell's sd, drawn afresh per move; the others do not move."""
    n = 2 if scenario == "couple" else 3
    s = strategies(scenario).index("reframe")
    base = fixed_params(scenario, isolate=True, sticky=True)
    effect = np.zeros_like(base.effect)
    effect[0, s] = -0.1
    effect_sd = np.zeros_like(effect)
    effect_sd[0, s] = 0.08
    state = make_state(scenario, [0.5] * n, 0.0, base.patterns[0])
    move = TherapistMove(True, None, (0,), s, "reframe")
    for sd_table, expect in ((effect_sd, 0.08), (np.zeros_like(effect), 0.0)):
        params = fixed_params(scenario, isolate=True, sticky=True, effect=effect, effect_sd=sd_table)
        distress, _ = CalibratedModel(scenario, params).simulate(state, move, 4000, np.random.default_rng(0))
        change = distress[:, 0] - 0.5
        assert change.mean() == pytest.approx(-0.1, abs=0.01)
        assert change.std() == pytest.approx(expect, abs=0.006)
        np.testing.assert_allclose(distress[:, 1:], 0.5, atol=1e-12)
