"""Group effects of the calibrated backend with fixed parameters:
the bucket effect, the ripple effect, stance softening and hardening.

Parameters come from the clinical priors alone (``fit.prior_params()``), adjusted per test;
mechanism tests switch everything else off to read one effect exactly, behaviour tests keep
the full model (noise included) and compare over many seeds.
"""

from __future__ import annotations

import numpy as np
import pytest

from rescue_env.dynamics import CalibratedModel, TherapistMove
from rescue_env.taxonomy.labels import strategies

SCENARIOS = ("couple", "family")
LISTEN = TherapistMove(False)


def _move(scenario: str, slots: tuple[int, ...], strategy: str) -> TherapistMove:
    s = strategies(scenario).index(strategy)
    return TherapistMove(True, None, slots, s, strategy)


# --- bucket effect ---------------------------------------------------------------------------
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_untended_distress_feeds_on_itself_exactly(scenario, fixed_params, make_state):
    sp = fixed_params(scenario, isolate=True, untended_growth=0.05)
    be = CalibratedModel(scenario, sp)
    d0 = [0.6, 0.3, 0.1][: 2 if scenario == "couple" else 3]
    st = make_state(scenario, d0, 0.0, None)
    be.step(st, LISTEN, np.random.default_rng(0))
    np.testing.assert_allclose(st.distress, np.array(d0) * 1.05, rtol=0, atol=1e-12)
    # an addressed member does not grow (the strategy's own effect is zero here); the others do
    st = make_state(scenario, d0, 0.0, None)
    be.step(st, _move(scenario, (0,), "join"), np.random.default_rng(0))
    np.testing.assert_allclose(st.distress, [d0[0]] + [x * 1.05 for x in d0[1:]], rtol=0, atol=1e-12)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_sidelining_the_worst_off_member_costs_extra(scenario, fixed_params, make_state):
    sp = fixed_params(scenario, isolate=True, sideline_penalty=0.04)
    be = CalibratedModel(scenario, sp)
    d0 = [0.8, 0.3, 0.2][: 2 if scenario == "couple" else 3]
    st = make_state(scenario, d0, 0.0, None)
    be.step(st, _move(scenario, (1,), "join"), np.random.default_rng(0))
    assert st.distress[0] == pytest.approx(0.84)
    st = make_state(scenario, d0, 0.0, None)
    be.step(st, _move(scenario, (0,), "join"), np.random.default_rng(0))
    assert st.distress[0] == pytest.approx(0.8)


def _run(be, make_state, scenario, d0, stance, pattern, policy, steps, seeds):
    finals = []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        st = make_state(scenario, d0, stance, pattern)
        for t in range(steps):
            be.step(st, policy(t), rng, streak=0)
        finals.append(st.copy())
    return finals


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_untended_high_distress_persists_or_rises(scenario, fixed_params, make_state):
    """Full model (noise, utterances, contagion, pattern changes) with fixed prior
    parameters: a highly distressed member nobody addresses stays at least as distressed
    over 20 steps, while addressing them brings the distress down."""
    be = CalibratedModel(scenario, fixed_params(scenario, quiet=False))
    d0 = [0.8, 0.4, 0.35][: 2 if scenario == "couple" else 3]
    seeds = range(80)
    never = _run(be, make_state, scenario, d0, -0.3, "pursue_withdraw", lambda t: LISTEN, 20, seeds)
    worst_never = np.array([s.distress[0] for s in never])
    assert np.mean(worst_never >= d0[0]) >= 0.95
    assert worst_never.mean() > d0[0] + 0.05
    # addressing someone else does not help the worst-off member: still persists or rises
    others = _run(be, make_state, scenario, d0, -0.3, "pursue_withdraw", lambda t: _move(scenario, (1,), "track"), 20, seeds)
    worst_others = np.array([s.distress[0] for s in others])
    assert np.mean(worst_others >= d0[0]) >= 0.9
    # tending them (every other step, so fatigue does not blunt the move) does
    tended = _run(
        be, make_state, scenario, d0, -0.3, "pursue_withdraw", lambda t: _move(scenario, (0,), "track") if t % 2 == 0 else LISTEN, 20, seeds
    )
    worst_tended = np.array([s.distress[0] for s in tended])
    assert worst_tended.mean() < d0[0] - 0.1
    assert worst_tended.mean() < worst_never.mean() - 0.2


# --- ripple effect ---------------------------------------------------------------------------
def test_distress_spreads_along_a_hostile_edge_exactly(fixed_params, make_state):
    be = CalibratedModel("couple", fixed_params("couple", isolate=True, contagion=0.2))
    out = {}
    for name, g in (("hostile", -0.8), ("warm", 0.8), ("one_sided", [[0, -0.8], [0.8, 0]])):
        st = make_state("couple", [0.9, 0.2], g, None)
        be.step(st, LISTEN, np.random.default_rng(0))
        out[name] = st.distress.copy()
    # rate × mutual hostility × gap, toward the less distressed member only
    assert out["hostile"][1] == pytest.approx(0.2 + 0.2 * 0.8 * 0.7, abs=1e-12)
    assert out["hostile"][0] == pytest.approx(0.9, abs=1e-12)
    np.testing.assert_allclose(out["warm"], [0.9, 0.2], atol=1e-12)
    np.testing.assert_allclose(out["one_sided"], [0.9, 0.2], atol=1e-12)  # mutual hostility 0


def test_family_ripple_follows_the_hostile_edge_not_the_warm_one(fixed_params, make_state):
    be = CalibratedModel("family", fixed_params("family", isolate=True, contagion=0.2))
    g = np.array([[0, -0.8, 0.8], [-0.8, 0, 0.0], [0.8, 0.0, 0]])
    st = make_state("family", [0.9, 0.2, 0.2], g, None)
    for _ in range(5):
        be.step(st, LISTEN, np.random.default_rng(0))
    assert st.distress[1] > 0.2 + 0.15  # the member on the hostile edge caught distress
    assert st.distress[2] == pytest.approx(0.2, abs=1e-12)  # the warm edge carried none
    assert st.distress[0] == pytest.approx(0.9, abs=1e-12)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_ripple_with_the_full_model(scenario, fixed_params, make_state):
    """Two states identical but for the sign of the stances: with the same seed the less
    distressed member's distress rises more across the hostile edge — in every draw after
    one step, and on average after ten."""
    be = CalibratedModel(scenario, fixed_params(scenario, quiet=False))
    d0 = [0.9, 0.2, 0.2][: 2 if scenario == "couple" else 3]
    one, ten = [], []
    for seed in range(60):
        deltas = {}
        for sign in (-1, 1):
            for steps, store in ((1, one), (10, ten)):
                rng = np.random.default_rng(seed)
                st = make_state(scenario, d0, 0.7 * sign, "mixed_transition")
                for _ in range(steps):
                    be.step(st, LISTEN, rng)
                deltas[(sign, steps)] = st.distress[1:].mean() - 0.2
        one.append(deltas[(-1, 1)] - deltas[(1, 1)])
        ten.append(deltas[(-1, 10)] - deltas[(1, 10)])
    if scenario == "couple":
        # a couple's turns do not depend on the stance sign: the draws match (the same clients,
        # traits included), only the ripple differs; clients differ in how much they take in
        assert min(one) > 0.0
        assert np.mean(one) > 0.05
    else:
        assert np.mean(one) > 0.03
    assert np.mean(ten) > 0.1


# --- stance dynamics -------------------------------------------------------------------------
@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("strategy", ["repair", "join", "enact"])
def test_repair_join_enact_soften_the_addressed_members_stances(scenario, strategy, fixed_params, make_state, priors_only):
    soften = priors_only[scenario].soften
    sp = fixed_params(scenario, isolate=True, soften=soften)
    be = CalibratedModel(scenario, sp)
    n = 2 if scenario == "couple" else 3
    st = make_state(scenario, [0.5] * n, -0.2, None)
    s = strategies(scenario).index(strategy)
    be.step(st, _move(scenario, (0,), strategy), np.random.default_rng(0))
    np.testing.assert_allclose(st.stance[0, 1:], -0.2 + soften[s] * 1.2, atol=1e-12)
    np.testing.assert_allclose(st.stance[1:, 0], -0.2, atol=1e-12)  # only the addressed member moves
    # these three are the strongest softeners of the scenario's strategies
    top3 = {strategies(scenario)[i] for i in np.argsort(-soften)[:3]}
    assert top3 == {"repair", "join", "enact"}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_fatigue_and_group_share_scale_the_move(scenario, fixed_params, make_state, priors_only):
    sp = fixed_params(scenario, isolate=True, soften=priors_only[scenario].soften, fatigue=0.5, group_share=0.5)
    be = CalibratedModel(scenario, sp)
    s = strategies(scenario).index("repair")
    n = 2 if scenario == "couple" else 3
    st = make_state(scenario, [0.5] * n, 0.0, None)
    be.step(st, _move(scenario, (0,), "repair"), np.random.default_rng(0), streak=2)
    assert st.stance[0, 1] == pytest.approx(sp.soften[s] * 0.25)
    st = make_state(scenario, [0.5] * n, 0.0, None)
    be.step(st, _move(scenario, tuple(range(n)), "repair"), np.random.default_rng(0))
    off = ~np.eye(n, dtype=bool)
    np.testing.assert_allclose(st.stance[off], sp.soften[s] * 0.5, atol=1e-12)


@pytest.mark.parametrize(
    "scenario,hostile,warm",
    [("couple", "attack_attack", "constructive_alignment"), ("family", "escalation_conflict", "cooperative_family_alliance")],
)
def test_stances_harden_in_attack_patterns(scenario, hostile, warm, fixed_params, make_state, priors_only):
    # mechanism: only the pattern's pull acts; the pattern is held fixed
    sp = fixed_params(scenario, isolate=True, sticky=True, harden=priors_only[scenario].harden)
    be = CalibratedModel(scenario, sp)
    n = 2 if scenario == "couple" else 3
    for pattern, direction in ((hostile, -1), (warm, +1)):
        st = make_state(scenario, [0.5] * n, 0.1, pattern)
        means = [st.mean_stance()]
        for _ in range(10):
            be.step(st, LISTEN, np.random.default_rng(0))
            means.append(st.mean_stance())
            assert st.pattern == pattern
        assert all(direction * (b - a) > 0 for a, b in zip(means, means[1:])), (pattern, means)
    # full model, pattern held: stances end colder in the attack pattern than in the warm one
    full = CalibratedModel(scenario, fixed_params(scenario, quiet=False, sticky=True))
    end = {}
    for pattern in (hostile, warm):
        vals = []
        for seed in range(40):
            rng = np.random.default_rng(seed)
            st = make_state(scenario, [0.5] * n, 0.1, pattern)
            for _ in range(15):
                full.step(st, LISTEN, rng)
            vals.append(st.mean_stance())
        end[pattern] = np.mean(vals)
    assert end[hostile] < 0.1 - 0.2
    assert end[warm] > 0.1
    # a repair move keeps its target warmer than listening does, even mid-attack
    kept = []
    for seed in range(40):
        finals = []
        for move in (_move(scenario, (0,), "repair"), LISTEN):
            rng = np.random.default_rng(seed)
            st = make_state(scenario, [0.5] * n, 0.1, hostile)
            for t in range(6):
                full.step(st, move if t % 2 == 0 else LISTEN, rng)
            finals.append(st.stance[0, 1:].mean())
        kept.append(finals[0] - finals[1])
    assert np.mean(kept) > 0.05


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_fixed_parameters_and_seed_give_identical_steps(scenario, fixed_params, make_state):
    be = CalibratedModel(scenario, fixed_params(scenario, quiet=False))
    n = 2 if scenario == "couple" else 4
    runs = []
    for _ in range(2):
        rng = np.random.default_rng(42)
        st = make_state(scenario, np.linspace(0.2, 0.8, n), -0.1, None)
        trace = []
        for t in range(15):
            turns = be.step(st, _move(scenario, (t % n,), "join") if t % 3 else LISTEN, rng, streak=t % 2)
            trace.append((st.distress.tobytes(), st.stance.tobytes(), st.pattern, [(x.slot, x.utterance_type, x.addressee) for x in turns]))
        runs.append(trace)
    assert runs[0] == runs[1]
    assert all(0.0 <= x <= 1.0 for x in np.frombuffer(runs[0][-1][0]))
