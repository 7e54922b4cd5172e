"""Instance builders: the rules of PROTOCOL.md, hand-derived counts, both profiles."""

from __future__ import annotations

from collections import Counter

import pytest

from rescue_env.data import load_dialogues, write_jsonl
from rescue_env.tasks import TASKS, build_instances, count_instances, even_sample
from rescue_env.tasks.instances import (
    paper_target_label,
    released_participants,
    released_target_candidates,
)

# Released instance counts on ../shared/data/rescue-bench-subset/benchmark_subset.jsonl
# (9 couple dialogues, 1 family dialogue of 112 rows).
RELEASED_SUBSET_COUNTS = {
    "itp": {"couple": 104, "family": 12},
    "rpp": {"couple": 70, "family": 55},
    "stp": {"couple": 53, "family": 33},
    "ssp": {"couple": 53, "family": 33},
    "er": {"couple": 43, "family": 5},
    "vp": {"couple": 40, "family": 5},
}
# The paper profile differs in RPP only on this file: every row with a non-empty
# Row.relation_label (relation_cycle_state on therapist rows, relation_pattern on others).
PAPER_SUBSET_RPP = {"couple": 122, "family": 55}

# Hand tallies, per sample, from PROTOCOL.md's rules applied to the file's rows:
# RPP (released) = therapist rows with a non-empty relation_cycle_state;
# STP = therapist rows whose first support_strategy item has a strategy_type.
HAND_RPP_RELEASED = {
    "alan_and_evelyn/001_s01e01_ct25_segment04": 4,  # rows 3, 5 attack_attack; 14, 16 withdraw_withdraw (10, 12 are "")
    "alan_and_evelyn/002_s01e02_ct81_segment01": 3,
    "alan_and_evelyn/003_s01e02_ct81_segment02": 16,
    "alan_and_evelyn/004_s01e04_ct78_segment01": 9,
    "alan_and_evelyn/005_s01e04_ct81_segment03": 2,
    "alan_and_evelyn/006_s01e06_ct10_segment03": 10,
    "alan_and_evelyn/007_s01e08_ct09_segment01": 6,
    "alan_and_evelyn/008_s01e09_ct04_segment01": 8,
    "alexes_and_casimar/001_s03e04_ct09_segment07": 12,
    "family_therapy/003/merged": 55,  # 60 therapist rows, 5 of them ""
}
HAND_STP = {
    "alan_and_evelyn/001_s01e01_ct25_segment04": 1,
    "alan_and_evelyn/002_s01e02_ct81_segment01": 2,
    "alan_and_evelyn/003_s01e02_ct81_segment02": 15,
    "alan_and_evelyn/004_s01e04_ct78_segment01": 7,
    "alan_and_evelyn/005_s01e04_ct81_segment03": 1,
    "alan_and_evelyn/006_s01e06_ct10_segment03": 6,
    "alan_and_evelyn/007_s01e08_ct09_segment01": 7,
    "alan_and_evelyn/008_s01e09_ct04_segment01": 4,
    "alexes_and_casimar/001_s03e04_ct09_segment07": 10,
    "family_therapy/003/merged": 33,
}


def test_even_sample_round_half_to_even():
    items = list(range(10))
    assert even_sample(items, 5) == [0, 2, 4, 7, 9]  # 4.5 rounds to 4, 6.75 to 7
    assert even_sample(items, 0) == items and even_sample(items, 12) == items
    assert even_sample(items, 1) == [5]  # ITP takes the middle
    assert even_sample(items, 1, single="first") == [0]  # ER and VP take the first
    assert even_sample(list(range(6)), 4) == [0, 2, 3, 5]  # 1.667 -> 2, 3.333 -> 3


def test_released_counts_on_the_real_subset(subset):
    assert count_instances(subset, "released") == RELEASED_SUBSET_COUNTS
    paper = count_instances(subset, "paper")
    assert paper["rpp"] == PAPER_SUBSET_RPP
    assert {t: c for t, c in paper.items() if t != "rpp"} == {t: c for t, c in RELEASED_SUBSET_COUNTS.items() if t != "rpp"}


def test_hand_tallies_agree_with_the_builders(subset):
    rpp = Counter(i.sample_id for i in build_instances(subset, "rpp", "released"))
    stp = Counter(i.sample_id for i in build_instances(subset, "stp", "released"))
    assert dict(rpp) == HAND_RPP_RELEASED
    assert dict(stp) == HAND_STP
    assert sum(v for k, v in HAND_RPP_RELEASED.items() if not k.startswith("family")) == RELEASED_SUBSET_COUNTS["rpp"]["couple"]
    assert sum(v for k, v in HAND_STP.items() if not k.startswith("family")) == RELEASED_SUBSET_COUNTS["stp"]["couple"]


def test_one_dialogue_derived_by_hand(subset):
    """alan_and_evelyn/001 (16 rows). Speakers: 1 A, 2 A, 3 T, 4 A, 5 T, 6-9 E, 10 T, 11 E,
    12 T, 13 E, 14 T, 15 A, 16 T.

    ITP: positives d = 2, 4, 9, 11, 13, 15 (client row then therapist row); negatives
    d = 1, 6, 7, 8 (no therapist on d or d+1). Balance to 4: positives at
    round(r * 5 / 3) = 0, 2, 3, 5 -> d = 2, 9, 11, 15.
    ER: 30 % cutoff drops rows 1-5 (ceil 4.8 = 5); client rows with the speaker's emotion
    and >= 5 words: 6, 8, 9 (7 has no emotion, 11, 13, 15 are one word).
    VP: rows whose speaker is the viewpoint's source: 2, 6, 7, 8, 9 (5 fit the limit).
    """
    d = next(x for x in subset if x.sample_id == "alan_and_evelyn/001_s01e01_ct25_segment04")
    itp = build_instances([d], "itp", "released")
    assert [(i.row_index, i.gold) for i in itp] == [(1, "no"), (2, "yes"), (6, "no"), (7, "no"), (8, "no"), (9, "yes"), (11, "yes"), (15, "yes")]
    assert [i.row_index for i in build_instances([d], "rpp", "released")] == [3, 5, 14, 16]
    assert [(i.row_index, i.gold) for i in build_instances([d], "stp", "released")] == [(5, "Evelyn")]
    assert [(i.row_index, i.gold) for i in build_instances([d], "ssp", "released")] == [(5, "counterbalance")]
    assert [i.row_index for i in build_instances([d], "er", "released")] == [6, 8, 9]
    assert [i.row_index for i in build_instances([d], "vp", "released")] == [2, 6, 7, 8, 9]
    # paper RPP: every labelled row (4 attack_attack + 4 withdraw_withdraw rows)
    assert len(build_instances([d], "rpp", "paper")) == 8


def test_itp_rules_on_a_toy_dialogue(toy):
    # A B T A A B T T A: positives d=2 (B->T), d=6 (B->T); negatives d=1 (A,B), 4 (A,A), 5 (A,B).
    # Balance to 2: negatives at round(r * 2 / 1) = 0, 2 -> d = 1, 5.
    speakers = ["Ann", "Bob", "Therapist", "Ann", "Ann", "Bob", "Therapist", "Therapist", "Ann"]
    d = toy([{"primary_speaker": s} for s in speakers], participants=["Ann", "Bob"])
    insts = build_instances([d], "itp", "paper")
    assert [(i.row, i.gold) for i in insts] == [(1, "no"), (2, "yes"), (5, "no"), (6, "yes")]
    assert [i.meta["boundary_type"] for i in insts] == ["non_therapist_exchange", "therapist_entry"] * 2
    # with one positive and two negatives (A A B T): even_sample(limit 1) keeps the middle one
    d2 = toy([{"primary_speaker": s} for s in ["Ann", "Ann", "Bob", "Therapist"]], participants=["Ann", "Bob"])
    one = build_instances([d2], "itp", "paper")
    assert [(i.row, i.gold, i.meta["boundary_type"]) for i in one] == [(2, "no", "non_therapist_exchange"), (3, "yes", "therapist_entry")]
    # what a predictor sees carries no class hint
    assert all("pos" not in i.id and "neg" not in i.id for i in insts)
    # a sample without a therapist entry gives nothing (balance 0)
    assert len(build_instances([toy([{"primary_speaker": "Ann"}, {"primary_speaker": "Bob"}])], "itp", "paper")) == 0


def test_rpp_profiles_differ_as_documented(toy):
    rows = [
        {"primary_speaker": "Ann", "relation_pattern": "pursue_withdraw"},
        {"primary_speaker": "Therapist", "relation_cycle_state": "pursue_withdraw"},
        {"primary_speaker": "Bob", "relation_pattern": ""},
        {"primary_speaker": "Therapist", "relation_cycle_state": "escalation_conflict"},  # a family label
        {"primary_speaker": "Therapist", "relation_cycle_state": ""},
    ]
    d = toy(rows, participants=["Ann", "Bob"], scenario="couple")
    released = build_instances([d], "rpp", "released")
    paper = build_instances([d], "rpp", "paper")
    assert [(i.row, i.gold) for i in released] == [(2, "pursue_withdraw"), (4, "escalation_conflict")]  # kept, always wrong
    assert [(i.row, i.gold) for i in paper] == [(1, "pursue_withdraw"), (2, "pursue_withdraw")]
    assert paper.excluded == {"out_of_taxonomy": 1}
    assert paper.instances[0].candidates[0] == "pursue_withdraw" and len(paper.instances[0].candidates) == 6
    # prior rows only: the asked row is never part of its own context
    assert [r.row_index for r in paper.instances[1].prior_rows(-1)] == [1]


def test_targets_dyads_and_candidates(toy):
    family = ["Ann", "Bob", "Cy"]
    rows = [
        {"primary_speaker": "Ann"},
        {"primary_speaker": "Therapist", "target": ["Bob", "Ann"], "support_strategy": [{"target": ["Bob", "Ann"], "strategy_type": "join"}]},
        {"primary_speaker": "Therapist", "target": ["Family"], "support_strategy": [{"target": [], "strategy_type": "track"}]},
        {"primary_speaker": "Therapist", "target": ["Cy"], "support_strategy": [{"target": ["Dee"], "strategy_type": "not_a_strategy"}]},
    ]
    d = toy(rows, participants=family, scenario="family")
    paper = build_instances([d], "stp", "paper")
    released = build_instances([d], "stp", "released")
    # paper keeps the dyad; released collapses it to the group label
    assert [i.gold for i in paper] == ["Ann & Bob", "Family", "Cy"]  # row 4: "Dee" is no client -> row target
    assert [i.gold for i in released] == ["Family", "Family", "Dee"]
    assert [i.meta["gold_source"] for i in paper] == ["support_strategy", "row_target_fallback", "row_target_fallback"]
    assert paper.instances[0].candidates == ["Ann", "Bob", "Cy", "Ann & Bob", "Ann & Cy", "Bob & Cy", "Family"]
    # released candidates: participants, group, then every therapist row's targets (dupes of the group label)
    assert released_participants(d) == ["Ann", "Bob", "Cy", "Dee"]
    assert released_target_candidates(d, released_participants(d)) == ["Ann", "Bob", "Cy", "Dee", "Family", "Family", ""]
    # SSP keeps only strategies of the family taxonomy
    assert [i.gold for i in build_instances([d], "ssp", "paper")] == ["join", "track"]
    assert paper_target_label(["Ann", "Bob", "Cy"], d) == "Family"
    assert paper_target_label(["Therapist"], d) == ""


def test_er_and_vp_rules(toy):
    words = "I really do not know what to say here"
    rows = [{"primary_speaker": "Ann", "dialogue_cleaned": words} for _ in range(3)]
    rows += [
        {"primary_speaker": "Ann", "dialogue_cleaned": words, "internal_emotion": [{"person": "Ann", "emotion_description": "hurt", "intensity": 7.5}]},
        {"primary_speaker": "Bob", "dialogue_cleaned": "no", "internal_emotion": [{"person": "Bob", "emotion_description": "numb", "intensity": 4}]},
        {"primary_speaker": "Bob", "dialogue_cleaned": words, "internal_emotion": [{"person": "Ann", "emotion_description": "sad", "intensity": 4}],
         "viewpoints_attitudes": [{"source": "Bob", "target": "Ann", "viewpoint": "she nags", "attitude": "irritated"},
                                  {"source": "Ann", "target": "Bob", "viewpoint": "x", "attitude": "y"}]},
        {"primary_speaker": "Therapist", "dialogue_cleaned": words, "viewpoints_attitudes": [{"source": "Therapist", "target": "Ann", "viewpoint": "z", "attitude": "w"}]},
    ]
    # one early labelled row that the cutoff drops: 7 rows -> drop ceil(2.1) = 3 rows
    rows[1]["internal_emotion"] = [{"person": "Ann", "emotion_description": "early", "intensity": 5}]
    d = toy(rows, participants=["Ann", "Bob"])
    er = build_instances([d], "er", "paper")
    assert [(i.row, i.gold) for i in er] == [(4, {"emotion": "hurt", "intensity": 8})]  # 7.5 rounds half to even -> 8
    vp = build_instances([d], "vp", "paper")
    assert [(i.row, [g["viewpoint"] for g in i.gold]) for i in vp] == [(6, ["she nags"])]


def test_unknown_task_or_profile_is_a_clear_error(seeds):
    with pytest.raises(ValueError, match="unknown task 'xyz'.*itp"):
        build_instances(seeds, "xyz")
    with pytest.raises(ValueError, match="unknown profile 'best'.*paper"):
        build_instances(seeds, "itp", "best")
    assert len(build_instances(seeds, "ITP")) > 0  # names are case-insensitive


def test_simulated_episodes_with_a_state_column_go_through_the_same_builders(seeds, tmp_path):
    """An episode exported by the simulator is benchmark rows plus a per-row ``state``
    column; written and read back, it gives the same instances as the plain rows."""
    episodes = load_dialogues()
    for d in episodes:
        for i, row in enumerate(d.rows):
            row.extras["state"] = {"distress": [0.5] * len(d.participants), "pattern": None, "row_index": i + 1}
    path = write_jsonl(episodes, tmp_path / "episodes.jsonl.gz")  # the form a rollout writes
    back = load_dialogues(path)
    assert all("state" in r.extras for d in back for r in d.rows)
    for task in TASKS:
        for profile in ("paper", "released"):
            got = build_instances(back, task, profile)
            want = build_instances(seeds, task, profile)
            assert [(i.id, i.gold) for i in got] == [(i.id, i.gold) for i in want], (task, profile)
            assert len(got) > 0
