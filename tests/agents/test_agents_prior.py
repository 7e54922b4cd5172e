"""The behaviour prior: fitted on real-format dialogues, a proper distribution over the env's
actions, calibrated in the large, saved and read back, group k-fold that never fits on the
held-out couple or family."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from gymnasium import spaces

from rescue_env.agents import make_agent
from rescue_env.agents.base import PriorError
from rescue_env.agents.prior import (
    OPTION_FEATURES,
    BehaviourPrior,
    PriorAgent,
    batch_from_obs,
    batch_from_states,
    cross_validate,
    option_features,
    real_decisions,
)
from rescue_env.data.groups import session_groups
from rescue_env.data.schema import THERAPIST
from rescue_env.envs.common import Observer
from rescue_env.taxonomy.actions import ActionEncoding
from rescue_env.taxonomy.labels import patterns

SCENARIOS = ("couple", "family")


@pytest.fixture(scope="module")
def prior(seeds) -> BehaviourPrior:
    return BehaviourPrior.fit(seeds)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_action_probs_are_a_distribution_on_the_mask(prior, seeds, scenario):
    d = next(d for d in seeds if d.scenario == scenario)
    dec = real_decisions([d], scenario)
    cap = 3 if scenario == "couple" else 6
    enc = ActionEncoding(scenario, cap)  # a cap above the group: options of absent members masked
    for st in dec.states[:10]:
        p = prior.action_probs(st, enc)
        assert p.shape == (enc.n_actions,) and np.isclose(p.sum(), 1.0)
        assert (p[enc.mask(st.n) == 0] == 0).all() and (p[enc.mask(st.n) == 1] > 0).all()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_calibrated_in_the_large_on_its_fit(prior, seeds, scenario):
    """Maximum likelihood with an intercept: the mean predicted rate of speaking and of each
    strategy matches the therapists' own (up to the probability floor and L2 shrinkage)."""
    dec = real_decisions(seeds, scenario)
    enc = ActionEncoding(scenario, max(st.n for st in dec.states))
    heads = [prior.rank(st, enc) for st in dec.states]
    speak = np.array([y for y in dec.speak if y >= 0])
    p_speak = np.array([h.p_speak for h, y in zip(heads, dec.speak) if y >= 0])
    assert abs(p_speak.mean() - speak.mean()) < 0.05
    moves = [(h, s) for h, s in zip(heads, dec.strategy) if s >= 0]
    freq = np.bincount([s for _, s in moves], minlength=enc.n_strategies) / len(moves)
    mean_p = np.mean([h.strategy_probs for h, _ in moves], axis=0)
    assert np.abs(mean_p - freq).max() < 0.1


def test_save_and_load_give_the_same_prior(prior, seeds, tmp_path):
    path = prior.save(tmp_path / "prior.json")
    again = BehaviourPrior.load(path)
    enc = ActionEncoding("couple")
    for st in real_decisions(seeds, "couple").states[:5]:
        assert np.allclose(again.action_probs(st, enc), prior.action_probs(st, enc))
    agent = make_agent("imitation", "couple", prior=str(path))
    assert isinstance(agent, PriorAgent) and agent.prior.fitted_on == prior.fitted_on


def test_load_refuses_other_files(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(ValueError, match="not a behaviour prior"):
        BehaviourPrior.load(tmp_path / "x.json")
    (tmp_path / "v.json").write_text(json.dumps({"format": "rescue-behaviour-prior", "version": 999, "scenarios": {}}))
    with pytest.raises(ValueError, match="version 999"):
        BehaviourPrior.load(tmp_path / "v.json")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        BehaviourPrior.load(tmp_path / "missing.json")
    with pytest.raises(PriorError, match="not a readable behaviour prior file"):
        BehaviourPrior.load(tmp_path)  # a folder
    (tmp_path / "cut.json").write_text('{"format": "rescue-behaviour')
    for bad in ["x.json", "v.json", "missing.json", "cut.json"]:  # every refusal is a PriorError (a user error)
        with pytest.raises(PriorError):
            BehaviourPrior.load(tmp_path / bad)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_observations_give_the_state_prior_without_the_turn(prior, seeds, scenario):
    """On env observations the prior is the one of the same state with its turn unknown (a
    simulated state has no transcript turn)."""
    enc = ActionEncoding(scenario)
    observer = Observer(enc, patterns(scenario), horizon=30)
    for st in real_decisions(seeds, scenario).states[:8]:
        sim = replace(st, last_client=None, last_utterance_type="", last_addressee=(), untended=np.minimum(st.untended, 10))
        obs = spaces.flatten(observer.space, observer.observe_state(sim))[None]
        assert np.allclose(prior.action_probs_from_obs(obs, observer, enc)[0], prior.action_probs(sim, enc), atol=1e-6)


def test_on_observations_the_prior_follows_the_client_who_spoke(prior, seeds):
    """The observation carries the latest client: the prior on it addresses that partner more
    than when the other partner spoke, as therapists do (the turn's best predictor)."""
    enc = ActionEncoding("couple")
    observer = Observer(enc, patterns("couple"), horizon=30)
    states = [st for st in real_decisions(seeds, "couple").states if st.last_client in st.members and st.n == 2 and st.last_speaker != THERAPIST][:20]
    assert states
    t_a = enc.target_for_slots([0], 2)  # partner A alone
    grid = lambda p: p[1:].reshape(enc.n_targets, -1).sum(axis=1)  # noqa: E731
    for st in states:
        by = {}
        for m in st.members:
            sim = replace(st, last_client=m, last_addressee=(), untended=np.minimum(st.untended, 10))
            obs = spaces.flatten(observer.space, observer.observe_state(sim))[None]
            by[m] = grid(prior.action_probs_from_obs(obs, observer, enc)[0])[t_a]
        assert by[st.members[0]] > by[st.members[1]]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_target_sees_whether_the_latest_client_spoke_the_last_row(seeds, scenario):
    """``just_spoke`` marks the client of the last row, and nobody after the therapist's own
    row (when a therapist goes on with whom it addressed); states and the observations of the
    same states agree on it, so the prior reads the turn in the simulator as on transcripts."""
    enc = ActionEncoding(scenario)
    observer = Observer(enc, patterns(scenario), horizon=30)
    col = OPTION_FEATURES.index("just_spoke")
    states = [st for st in real_decisions(seeds, scenario).states if st.last_client in st.members and st.n <= enc.max_members]
    after_therapist = [st for st in states if st.last_speaker == THERAPIST]
    after_client = [st for st in states if st.last_speaker != THERAPIST]
    assert after_therapist and after_client
    for st in after_therapist[:5] + after_client[:5]:
        obs = spaces.flatten(observer.space, observer.observe_state(st))[None]
        by_state = option_features(batch_from_states([st], enc.max_members), enc)[0][0, :, col]
        by_obs = option_features(batch_from_obs(obs, observer, scenario), enc)[0][0, :, col]
        expected = np.zeros(enc.n_targets)
        if st.last_speaker != THERAPIST:
            expected[enc.target_for_slots([st.members.index(st.last_client)], st.n)] = 1.0
        assert np.array_equal(by_state, expected) and np.array_equal(by_obs, expected)


def test_the_opening_move_is_learned_and_marked_on_the_group(families):
    """STP asks about the session's first move; the prior learns it (a decision before the
    first row) and its group option reads "no client has spoken yet", from a state and from
    its observation alike. The bundled families all open to the whole family, so a prior
    fitted on two of them opens to the whole family of the third."""
    enc = ActionEncoding("family")
    observer = Observer(enc, patterns("family"), horizon=30)
    col = OPTION_FEATURES.index("group_at_opening")
    group = enc.target_for_slots(range(3), 3)
    dec = real_decisions(families, "family")
    openings = [i for i, st in enumerate(dec.states) if st.row_index == 0]
    assert len(openings) == 3 and all(dec.speak[i] == -1 and len(dec.target[i]) == dec.states[i].n for i in openings)
    later = next(st for st in dec.states if st.last_client is not None and st.n == 3)
    for st, expected in ((dec.states[openings[0]], 1.0), (later, 0.0)):
        obs = spaces.flatten(observer.space, observer.observe_state(st))[None]
        for batch in (batch_from_states([st], enc.max_members), batch_from_obs(obs, observer, "family")):
            X, valid = option_features(batch, enc)
            others = valid[0] & (np.arange(enc.n_targets) != group)
            assert X[0, group, col] == expected and (X[0, others, col] == 0).all()  # the group option only
    held = families[0]
    prior = BehaviourPrior.fit(families[1:], ["family"])
    opening = real_decisions([held], "family").states[0]
    assert opening.row_index == 0
    probs = prior.rank(opening, enc).target_probs
    assert int(np.argmax(probs)) == group


def test_act_respects_the_mask(prior, seeds):
    agent = PriorAgent(prior, "family", seed=0)
    st = real_decisions(seeds, "family").states[5]
    mask = agent.encoding.mask(st.n)
    assert all(mask[agent.act(None, mask, st)] for _ in range(50))
    with pytest.raises(ValueError, match="state"):
        agent.act(None, mask, None)


@pytest.mark.parametrize("scenario,other", [("couple", "family"), ("family", "couple")])
def test_no_therapist_move_errors_clearly(scenario, other, seeds):
    with pytest.raises(ValueError, match=f"no {scenario} therapist move"):
        BehaviourPrior.fit([d for d in seeds if d.scenario == other], [scenario])
    with pytest.raises(ValueError, match=f"no {scenario} therapist move"):
        make_agent("imitation", scenario, imitation_data=[])
    with pytest.raises(ValueError, match=f"fitted on \\['{other}'\\]"):
        BehaviourPrior.fit([d for d in seeds if d.scenario == other]).rank(real_decisions(seeds, scenario).states[0], ActionEncoding(scenario))


def test_session_groups_keep_a_couple_and_a_family_together(seeds):
    couple = next(d for d in seeds if d.scenario == "couple")
    fam = next(d for d in seeds if d.scenario == "family" and len(d.participants) == 3)
    a, b = couple.participants
    x, y, z = fam.participants
    ds = [
        replace(couple, sample_id="pat_and_sam/001_x", participants=[a, b]),
        replace(couple, sample_id="pat_and_sam/002_y", participants=[b, a]),  # order varies
        replace(couple, sample_id="kim_and_lee/001_z", participants=[a, b]),  # another couple
        replace(fam, sample_id="family_therapy/001/merged", participants=[x, y, z]),
        replace(fam, sample_id="family_therapy/002/merged", participants=[x, y, "Newborn"]),  # same family
        replace(fam, sample_id="family_therapy/003/merged", participants=["P", "Q", z]),  # another family
    ]
    by_id = session_groups(ds)
    g = [by_id[d.sample_id] for d in ds]
    assert g[0] == g[1] != g[2]
    assert g[3] == g[4] != g[5]
    assert len(set(g)) == 4


def test_cross_validate_never_fits_on_the_held_out_group(seeds, monkeypatch):
    seen: list[tuple[set[str], list[str]]] = []
    real_fit = BehaviourPrior.fit.__func__

    def spy(cls, dialogues, scenarios=None, C=None):
        seen.append(({d.sample_id for d in dialogues}, list(scenarios or [])))
        return real_fit(cls, dialogues, scenarios, C)

    monkeypatch.setattr(BehaviourPrior, "fit", classmethod(spy))
    couples = [d for d in seeds if d.scenario == "couple"][:3]
    r = cross_validate(couples, tasks=("stp",))
    assert len(seen) == 3
    for fitted, _ in seen:
        assert len(fitted) == 2  # every fold held one session (each its own couple) out
    assert {"prior", "majority"} <= set(r) and r["prior"]["stp"]["n"] == r["majority"]["stp"]["n"] > 0
    # the paired counts are those the figures come from, on the same instances
    pc = r["paired"]["stp"]["couple"]
    assert pc["n"] == r["prior"]["stp"]["n"]
    for name in ("prior", "majority"):
        assert pc[name] == round(r[name]["stp"]["recall_at_1"] * pc["n"])
    assert pc["prior"] - pc["prior_only"] == pc["majority"] - pc["majority_only"] >= 0  # right by both


def test_regularisation_is_chosen_by_group_k_fold_inside_the_training_data():
    """Noise features are shrunk hard (toward the label frequencies); a feature that predicts
    the label in every group keeps a loose penalty."""
    from rescue_env.agents.prior import C_GRID, _Head

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 6))
    groups = np.repeat(np.arange(5), 80).astype(str)
    noise = _Head(X, rng.integers(0, 2, 400), groups, None)
    signal = _Head(X, (X[:, 0] + 0.3 * rng.normal(size=400) > 0).astype(int), groups, None)
    assert min(C_GRID) <= noise.choose_C() <= 0.01 < 0.1 <= signal.choose_C()
    assert signal.held_out_nll(signal.choose_C()) < noise.held_out_nll(noise.choose_C())
