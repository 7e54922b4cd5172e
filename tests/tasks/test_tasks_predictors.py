"""Offline predictors: baselines, the agent adapter, pattern classifiers, carry-forward."""

from __future__ import annotations

import pytest

from rescue_env.tasks import (
    TASKS,
    AgentPredictor,
    CarryForwardGenerator,
    CarryForwardPatternClassifier,
    PatternQuery,
    build_instances,
    make_baseline,
    run_tasks,
)
from rescue_env.tasks.predictors import target_role


def _run(dialogues, predictor, tmp_path, judge, bert, profile="paper", tasks=TASKS):
    return run_tasks(dialogues, tasks, predictor, profile, tmp_path, progress=False, judge=judge, bertscore=bert, print_table=False)


@pytest.mark.parametrize("name", ["majority", "prior", "random"])
@pytest.mark.parametrize("profile", ["paper", "released"])
def test_baselines_end_to_end_on_seeds_and_subset(name, profile, seeds, subset, tmp_path, lexical_judge, const_bert):
    for label, data in (("seeds", seeds), ("subset", subset)):
        res = _run(data, make_baseline(name, seed=3), tmp_path / label, lexical_judge, const_bert, profile)
        assert set(res) == set(TASKS)
        for task in TASKS:
            r = res[task]
            assert r["n"] == len(build_instances(data, task, profile)) > 0, (label, task)
            assert r["failed"] == 0
            assert sum(s["n"] for s in r["by_scenario"].values()) == r["n"]
            assert sum(s["n"] for s in r["by_sample"].values()) == r["n"]
        assert 0.0 <= res["itp"]["f1"] <= 1.0
        assert 0.0 <= res["stp"]["recall_at_1"] <= res["stp"]["recall_at_3"] <= 1.0
        assert 1.0 <= res["er"]["s_er"] <= 5.0 and 0.0 <= res["vp"]["total"] <= 6.0
        assert res["er"]["generator"] == "carry_forward"


def test_majority_ties_and_frequencies(seeds, tmp_path, lexical_judge):
    maj = make_baseline("majority")
    res = _run(seeds, maj, tmp_path, lexical_judge, None, tasks=["itp", "ssp"])
    # balanced ITP is a tie, broken towards "yes": recall of yes is 1, precision 1/2
    assert res["itp"]["recall"] == 1.0 and res["itp"]["precision"] == pytest.approx(0.5)
    # SSP: the most frequent couple strategy ranks first
    counts = maj.counts[("ssp", "couple")]
    inst = next(i for i in build_instances(seeds, "ssp") if i.scenario == "couple")
    assert maj.predict("ssp", inst).value[0] == counts.most_common(1)[0][0]


def test_random_and_prior_are_seeded_per_instance(seeds):
    insts = build_instances(seeds, "rpp")
    a, b, c = make_baseline("random", seed=1), make_baseline("random", seed=1), make_baseline("random", seed=2)
    first = [a.predict("rpp", i).value for i in insts]
    assert first == [b.predict("rpp", i).value for i in reversed(insts)][::-1]  # order does not matter
    assert first != [c.predict("rpp", i).value for i in insts]
    p = make_baseline("prior", seed=0)
    p.prepare("rpp", "paper", seeds)
    assert all(len(set(p.predict("rpp", i).value)) == 3 for i in insts)


def test_target_roles(seeds):
    inst = next(i for i in build_instances(seeds, "stp") if i.row > 3)
    roles = {c: target_role(c, inst) for c in inst.candidates}
    assert roles[inst.dialogue.group_label] == "group"
    assert "speaker1" in roles.values()


def test_agent_predictor_uses_the_state_at_the_instance_row(seeds, tmp_path, stub_agent, lexical_judge):
    pred = AgentPredictor(stub_agent)
    res = _run(seeds, pred, tmp_path, lexical_judge, None)
    assert all(res[t]["failed"] == 0 for t in TASKS)
    assert pred.name == "agent:stub"
    # ITP reads the state after the decision row; STP answers are target labels of the profile
    inst = build_instances(seeds, "itp")[0]
    p = pred.predict("itp", inst)
    state = pred.state_before(inst, inst.row)
    assert p.value == ("yes" if state.max_distress() > 0.5 else "no")
    stp = next(i for i in build_instances(seeds, "stp") if i.scenario == "family")
    ranked = pred.predict("stp", stp).value
    assert ranked[0] == stp.dialogue.participants[pred.state_before(stp, stp.row - 1).worst_off()]
    assert ranked[1] == "Family"
    assert set(ranked) <= set(stp.candidates)
    # SSP: the stub ranks strategies in taxonomy order
    ssp = build_instances(seeds, "ssp")[0]
    assert pred.predict("ssp", ssp).value == list(ssp.candidates[:3])


def test_agent_factory_per_scenario(seeds, stub_agent):
    asked = []

    def factory(scenario):
        asked.append(scenario)
        return stub_agent

    pred = AgentPredictor(factory, name="stub")
    for inst in build_instances(seeds, "ssp"):
        pred.predict("ssp", inst)
    assert sorted(asked) == ["couple", "family"]


def test_a_failing_agent_is_counted_not_fatal(seeds, tmp_path, lexical_judge):
    class Broken:
        name = "broken"

        def rank(self, state, encoding):
            raise RuntimeError("boom")

    res = _run(seeds, AgentPredictor(Broken()), tmp_path, lexical_judge, None, tasks=["itp", "stp"])
    assert res["itp"]["failed"] == res["itp"]["n"] > 0
    assert res["stp"]["recall_at_3"] == 0.0


def test_carry_forward_pattern_classifier(toy):
    rows = [
        {"primary_speaker": "Ann", "relation_pattern": "attack_attack"},
        {"primary_speaker": "Bob", "relation_pattern": "repair_softening"},
        {"primary_speaker": "Ann", "relation_pattern": "attack_attack"},
        {"primary_speaker": "Bob", "relation_pattern": "attack_attack"},
        {"primary_speaker": "Ann", "relation_pattern": ""},
    ]
    d = toy(rows, participants=["Ann", "Bob"], scenario="couple")
    pc = CarryForwardPatternClassifier().fit([d])
    labels = ("pursue_withdraw", "attack_attack", "withdraw_withdraw", "repair_softening", "constructive_alignment", "mixed_transition")
    # after row 2 the last pattern is repair_softening; its only transition went to attack_attack
    p = pc.predict_proba(PatternQuery("couple", labels, d.rows[:2]))
    order = sorted(labels, key=lambda x: -p[x])
    assert order[:2] == ["repair_softening", "attack_attack"]
    assert sum(p.values()) == pytest.approx(1.0)
    # "" (no clear pattern) clears it: the marginal takes over (attack_attack most frequent)
    p2 = pc.predict_proba(PatternQuery("couple", labels, d.rows))
    assert max(p2, key=p2.get) == "attack_attack"
    assert CarryForwardPatternClassifier().predict_proba(PatternQuery("couple", labels, [])) == {lab: pytest.approx(1 / 6) for lab in labels}


def test_carry_forward_generator(toy):
    rows = [
        {"primary_speaker": "Ann", "internal_emotion": [{"person": "Ann", "emotion_description": "hurt", "intensity": 6}],
         "viewpoints_attitudes": [{"source": "Ann", "target": "Bob", "viewpoint": "he leaves", "attitude": "sad"}]},
        {"primary_speaker": "Bob", "internal_emotion": [{"person": "Bob", "emotion_description": "numb", "intensity": 3}]},
        {"primary_speaker": "Ann", "internal_emotion": [{"person": "Ann", "emotion_description": "angry", "intensity": 8}],
         "viewpoints_attitudes": [{"source": "Ann", "target": "Bob", "viewpoint": "he never listens", "attitude": "angry"}]},
    ]
    d = toy(rows, participants=["Ann", "Bob"])
    er = build_instances([d], "er")  # 3 rows: the cutoff drops the first
    gen = CarryForwardGenerator()
    by_row = {i.row: gen.er(i).value for i in er}
    assert by_row == {2: {"emotion": "feels tense and uneasy", "intensity": 6}, 3: {"emotion": "hurt", "intensity": 6}}
    vp = {i.row: gen.vp(i).value for i in build_instances([d], "vp")}
    assert vp == {1: [], 3: [{"source": "Ann", "target": "Bob", "viewpoint": "he leaves"}]}


def test_unknown_baseline():
    with pytest.raises(ValueError, match="unknown baseline 'best'"):
        make_baseline("best")


def test_a_policy_answers_at_its_own_group_cap_and_names_what_it_cannot(tmp_path):
    """A couple policy trained with env.max_members=3 ranks two-person couples; a family
    session (another scenario) and a couple larger than a cap-2 policy's fail with the reason,
    counted, not a traceback."""
    from dataclasses import replace

    from sb3_contrib import MaskablePPO

    from rescue_env.agents import make_agent
    from rescue_env.config import EnvConfig
    from rescue_env.data import load_dialogues
    from rescue_env.envs.vec_env import GroupSupportVecEnv
    from rescue_env.tasks.instances import build_instances

    paths = {}
    for cap in (2, 3):
        venv = GroupSupportVecEnv(num_envs=1, seed=0, config=EnvConfig(scenario="couple", max_members=cap))
        paths[cap] = tmp_path / f"c{cap}.zip"
        MaskablePPO("MlpPolicy", venv, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu", policy_kwargs={"net_arch": [8]}).learn(32).save(paths[cap])
        venv.close()
    seeds = load_dialogues()
    couple = next(d for d in seeds if d.scenario == "couple")
    family = next(d for d in seeds if d.scenario == "family" and len(d.participants) == 3)
    trio = replace(family, sample_id="trio/001", scenario="couple")  # a couple of three partners
    data = [couple, family]
    p3 = AgentPredictor(lambda s: make_agent("maskable_ppo", s, policy=str(paths[3])), name="c3")
    p3.prepare("stp", "paper", data)
    answers = {i.sample_id: p3.predict("stp", i) for i in build_instances(data, "stp", "paper")}
    assert not answers[couple.sample_id].failed and answers[couple.sample_id].value
    assert answers[family.sample_id].failed and "couple policy" in answers[family.sample_id].reason
    p2 = AgentPredictor(lambda s: make_agent("maskable_ppo", s, policy=str(paths[2])), name="c2")
    p2.prepare("stp", "paper", [couple, trio])
    got = {i.sample_id: p2.predict("stp", i) for i in build_instances([couple, trio], "stp", "paper")}
    assert not got[couple.sample_id].failed
    assert got["trio/001"].failed and "at most 2 members" in got["trio/001"].reason and "env.max_members=3" in got["trio/001"].reason
    with pytest.raises(ValueError, match="couple policy"):  # nothing it can answer: an error
        AgentPredictor(lambda s: make_agent("maskable_ppo", s, policy=str(paths[3]))).prepare("stp", "paper", [family])
