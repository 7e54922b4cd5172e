"""Fidelity on real data never seen: k-fold by group on the three shared real slices, with
fixed seeds, inside the targets of DESIGN.md §7 (one step, strategy effects, whole sessions)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rescue_env.data import load_dialogues
from rescue_env.dynamics.fidelity import HORIZONS, _group_folds, evaluate_fidelity
from rescue_env.data.groups import session_groups
from rescue_env.dynamics.replay import extract_steps


@pytest.fixture(scope="module")
def real(real_subset_path, real_more_path, real_extra_path):
    return load_dialogues([real_subset_path, real_more_path, real_extra_path])


@pytest.fixture(scope="module")
def kfold(real):
    return {s: evaluate_fidelity(real, s, folds=5, seed=0, sim_draws=20).summary() for s in ("couple", "family")}


def test_sessions_of_one_family_are_one_group(real):
    groups = session_groups(real)
    by_id = {d.sample_id: groups[d.sample_id] for d in real}
    # Maria and Joel come with Laura, with Nick, and with Laura and Josh: one family
    assert by_id["family_therapy/003/merged"] == by_id["family_therapy/006/merged"] == by_id["family_therapy/010/merged"]
    assert by_id["family_therapy/014/merged"] == by_id["family_therapy/015/merged"] == by_id["family_therapy/016/merged"]
    assert by_id["family_therapy/013/merged"] != by_id["family_therapy/014/merged"]
    assert len({g for sid, g in by_id.items() if sid.startswith("erica_and_sean/")}) == 1
    assert len({g for d, g in zip(real, by_id.values()) if d.scenario == "family"}) == 5


@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_folds_keep_a_group_together(real, scenario):
    ds = [d for d in real if d.scenario == scenario]
    groups = session_groups(ds)
    folds = _group_folds(ds, 5, np.random.default_rng(0))
    assert sorted(int(i) for f in folds for i in f) == list(range(len(ds)))
    for f in folds:
        inside = {groups[ds[i].sample_id] for i in f}
        outside = {groups[ds[i].sample_id] for g in folds if g is not f for i in g}
        assert not inside & outside


def test_a_real_dialogue_is_cut_at_therapist_rows(real):
    d = next(x for x in real if x.sample_id == "family_therapy/014/merged")
    steps = extract_steps(d)
    assert len(steps) == sum(r.is_therapist for r in d.rows) + 1  # one per therapist row, and the close
    assert all((s.strategy >= 0) == s.intervene for s in steps)
    assert any(not s.intervene for s in steps[:-1]) and any(s.intervene for s in steps)


@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_one_step_targets(kfold, scenario):
    f = kfold[scenario]
    assert 0.80 <= f["coverage_90"] <= 0.97
    assert 0.40 <= f["coverage_50"] <= 0.60
    assert 0.8 <= f["sd_ratio"] <= 1.25
    assert f["loglik_gain_nats"] >= 0.3
    # patterns last about as long as real ones (the stay rates are learnt per pattern)
    assert abs(math.log(f["dwell_time"]["simulated"] / f["dwell_time"]["real"])) < math.log(1.35), f["dwell_time"]
    assert all(math.isfinite(v) for v in f["calibration"].values())
    json.dumps(f)  # the fidelity.json section serialises


@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_strategy_effects_match_real_ones(kfold, scenario):
    effects = kfold[scenario]["effects"]
    judged = [e for e in effects if e["n"] >= 10]
    assert len(judged) >= 4
    off = [(e["strategy"], round(e["z"], 2)) for e in judged if abs(e["z"]) > 2]
    assert not off, off
    for e in effects:
        assert set(e) == {"strategy", "n", "real_mean", "real_se", "sim_mean", "z"}


@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_whole_session_targets(kfold, scenario):
    tr = kfold[scenario]["trajectory"]
    assert tr["horizons"] == list(HORIZONS) and tr["windows"] > 100
    for h in ("3", "6"):
        assert 0.80 <= tr["coverage_90_worst"][h] <= 0.97, h
        assert 0.75 <= tr["variogram_ratio"][h] <= 1.33, h
    # real distress drifts: the worst-off reading's change spreads more over 6 steps than 1
    assert tr["variogram"]["real"]["6"] > tr["variogram"]["real"]["1"] and tr["variogram"]["sim"]["6"] > tr["variogram"]["sim"]["1"]
    rate = tr["pattern_change_rate"]
    assert 0.75 <= rate["sim"] / rate["real"] <= 1.33
    assert tr["pattern_tvd"] <= 0.25
    drift = tr["stance_drift"]
    assert 0.67 <= drift["sim"] / drift["real"] <= 1.5
