"""Calibration: fitting, the parameter file, fidelity, and ``rescue calibrate`` (item 10)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rescue_env.data import load_dialogues
from rescue_env.dynamics import CalibratedModel, DynamicsParams, ScenarioParams
from rescue_env.dynamics.fidelity import evaluate_fidelity, format_fidelity, plot_fidelity
from rescue_env.data.groups import group_id
from rescue_env.dynamics.fit import TRANSITION_STRENGTHS, extract_effects, extract_transitions, fit_params, fit_scenario, prior_params
from rescue_env.dynamics.priors import transition_prior
from rescue_env.envs.gym_env import GroupSupportEnv
from rescue_env.taxonomy.labels import strategies

REPO = Path(__file__).resolve().parents[2]


def _loglik_row(table: str, scenario: str) -> list[float]:
    """Numbers of the scenario's row in the log-likelihood table (tabulate trims zeros)."""
    for line in table.splitlines():
        parts = line.split()
        if parts and parts[0] == scenario and len(parts) == 7:
            return [float(x) for x in parts[1:]]
    raise AssertionError(f"no log-likelihood row for {scenario}:\n{table}")


@pytest.fixture(scope="module")
def seeds():
    return load_dialogues()


@pytest.fixture(scope="module")
def fitted(seeds):
    return fit_params(seeds, sources=["bundled seeds"])


def test_fit_counts_match_the_data(seeds, fitted):
    for scenario in ("couple", "family"):
        ds = [d for d in seeds if d.scenario == scenario]
        prov = fitted.provenance["scenarios"][scenario]
        recs = [t for d in ds for t in extract_transitions(d)]
        assert prov["dialogues"] == len(ds) > 0
        assert prov["transitions"] == len(recs) > 0
        assert prov["transitions_per_action"]["listen"] == sum(t.action == 0 for t in recs)
        assert sum(prov["transitions_per_action"].values()) == prov["transitions"]
        effects = [e for d in ds for e in extract_effects(d)]
        strats = strategies(scenario)
        for s, name in enumerate(strats):
            assert prov["effect_observations_per_strategy"][name] == sum(e.strategy == s for e in effects)
        for key in ("untended_observations", "utterance_observations", "answer_observations", "turn_gaps"):
            assert isinstance(prov[key], int) and prov[key] >= 0
        assert prov["utterance_observations"] > 0
    assert fitted.provenance["sources"] == ["bundled seeds"]
    for scenario in ("couple", "family"):
        chosen = fitted.provenance["scenarios"][scenario]["transition_strength"]
        assert chosen["groups"] == len({group_id(d) for d in seeds if d.scenario == scenario})
        assert all(chosen[k] in TRANSITION_STRENGTHS for k in ("stay_pattern", "stay_row", "change_pattern", "change_row"))


def test_fit_is_a_valid_model(fitted):
    for scenario in ("couple", "family"):
        sp = fitted[scenario]
        np.testing.assert_allclose(sp.transition.sum(axis=2), 1.0, atol=1e-9)
        assert (sp.transition > 0).all()  # smoothing toward the prior leaves no impossible move
        np.testing.assert_allclose(sp.utterance.sum(axis=1), 1.0, atol=1e-9)
        assert 0.01 <= sp.untended_growth <= 0.1


def test_without_data_the_fit_is_the_prior():
    pp = prior_params()
    for scenario in ("couple", "family"):
        np.testing.assert_allclose(pp[scenario].transition, transition_prior(scenario), atol=1e-12)
    # a scenario with no dialogue keeps the base file's parameters and says so
    couple_only = [d for d in load_dialogues() if d.scenario == "couple"]
    base = DynamicsParams.load()
    out = fit_params(couple_only, base=base)
    assert out["family"] is base["family"]
    assert out.provenance["scenarios"]["family"]["dialogues"] == 0


def test_data_moves_the_estimates_toward_the_counts(seeds):
    """More data, further from the prior: a transition seen many times gains probability."""
    ds = [d for d in seeds if d.scenario == "couple"]
    fit1, _ = fit_scenario(ds[:1], "couple")
    fit_all, _ = fit_scenario(ds, "couple")
    prior = transition_prior("couple")
    counts = np.zeros_like(prior)
    for d in ds:
        for t in extract_transitions(d):
            counts[t.action, t.src, t.dst] += 1
    a, i, j = np.unravel_index(np.argmax(counts), counts.shape)
    empirical = counts[a, i, j] / counts[a, i].sum()
    assert abs(fit_all.transition[a, i, j] - empirical) < abs(prior[a, i, j] - empirical)
    assert abs(fit_all.transition[a, i, j] - empirical) <= abs(fit1.transition[a, i, j] - empirical) + 1e-12


def test_params_json_round_trip(fitted, tmp_path):
    path = fitted.save(tmp_path / "sub" / "params.json")
    assert path.exists()
    back = DynamicsParams.load(path)
    assert back.to_dict() == json.loads(path.read_text())
    assert back.provenance == fitted.provenance
    for scenario in ("couple", "family"):
        a, b = fitted[scenario], back[scenario]
        np.testing.assert_allclose(a.transition, b.transition, atol=1e-6)
        np.testing.assert_allclose(a.effect, b.effect, atol=1e-6)
        assert a.untended_growth == pytest.approx(b.untended_growth, abs=1e-6)
        assert b.to_dict() == ScenarioParams.from_dict(b.to_dict()).to_dict()
    # a second save of the loaded object is byte-identical (exact round trip)
    again = back.save(tmp_path / "again.json")
    assert again.read_text() == path.read_text()


def test_params_file_errors(fitted, tmp_path):
    with pytest.raises(FileNotFoundError, match="rescue calibrate"):
        DynamicsParams.load(tmp_path / "missing.json")
    data = fitted.to_dict()
    data["version"] = 99
    with pytest.raises(ValueError, match="version"):
        DynamicsParams.from_dict(data)
    sp = fitted["couple"]
    with pytest.raises(ValueError, match="shape"):
        replace(sp, effect=sp.effect[:, :3])
    bad = sp.transition.copy()
    bad[0, 0, 0] += 0.5
    with pytest.raises(ValueError, match="sum to 1"):
        replace(sp, transition=bad)
    with pytest.raises(ValueError, match="couple"):
        CalibratedModel("family", sp)


@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_evaluate_fidelity(seeds, scenario):
    res = evaluate_fidelity(seeds, scenario, folds=3, seed=0, sim_draws=5)
    n = sum(d.scenario == scenario for d in seeds)
    assert res.dialogues == n and res.folds == min(3, n)
    assert res.transitions == sum(len(extract_transitions(d)) for d in seeds if d.scenario == scenario)
    assert math.isfinite(res.loglik_model) and math.isfinite(res.loglik_baseline)
    assert res.loglik_model < 0 and res.loglik_baseline < 0
    assert res.gain == pytest.approx(res.loglik_model - res.loglik_baseline)
    assert list(res.distress_change) == list(strategies(scenario))
    observed = 0
    for name, v in res.distress_change.items():
        assert v["n"] == len(v["real"])
        assert len(v["sim"]) == 5 * v["n"]
        if v["n"]:
            observed += 1
            for k in ("real_mean", "real_sd", "sim_mean", "sim_sd"):
                assert math.isfinite(v[k])
    assert observed > 0
    d = res.to_dict()
    assert d["gain_nats"] == res.gain and json.loads(json.dumps(d)) == d
    # same seed, same report
    assert evaluate_fidelity(seeds, scenario, folds=3, seed=0, sim_draws=5).to_dict() == d


def test_fidelity_with_too_little_data(seeds):
    one = [d for d in seeds if d.scenario == "couple"][:1]
    res = evaluate_fidelity(one, "couple")
    assert res.folds == 0 and res.transitions == 0 and math.isnan(res.loglik_model)


def test_fidelity_table_and_plot(seeds, tmp_path):
    results = [evaluate_fidelity(seeds, s, folds=2, sim_draws=3) for s in ("couple", "family")]
    table = format_fidelity(results)
    assert "log-likelihood" in table and "marginal baseline" in table
    for r in results:
        row = _loglik_row(table, r.scenario)
        assert row[:3] == [r.dialogues, r.folds, r.transitions]
        assert row[3:] == pytest.approx([r.loglik_model, r.loglik_baseline, r.gain], abs=6e-4)
        for name in r.distress_change:
            assert name in table
    png = plot_fidelity(results, tmp_path / "f.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_rescue_calibrate_cli(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "rescue_env.experiments.cli", "calibrate", f"hydra.run.dir={run}", "folds=3", "sim_draws=5"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "Held-out pattern log-likelihood per transition" in out
    assert "Distress change of the addressed member" in out
    assert "couple" in out and "family" in out and "caveat: small data" in out
    for name in ("dynamics_params.json", "fidelity.json", "fidelity.png"):
        assert (run / name).is_file(), name
    fid = json.loads((run / "fidelity.json").read_text())
    assert [s["scenario"] for s in fid["scenarios"]] == ["couple", "family"]
    # without holdout.path: k-fold over the training data, with the headline figures
    assert set(fid["kfold"]) == {"couple", "family"} and "holdout" not in fid
    for figures in fid["kfold"].values():
        for key in ("dialogues", "transitions", "loglik_gain_nats", "moves", "coverage_90", "coverage_50", "sd_ratio", "dwell_time", "transition_facts"):
            assert key in figures, key
        assert 0.0 <= figures["coverage_50"] <= figures["coverage_90"] <= 1.0
    assert "coverage_90" in out and "Pattern changes: the paper's shares" in out
    for s in fid["scenarios"]:
        assert math.isfinite(s["loglik_per_transition_model"]) and s["folds"] == 3
        row = _loglik_row(out, s["scenario"])
        assert row[3:] == pytest.approx([s["loglik_per_transition_model"], s["loglik_per_transition_baseline"], s["gain_nats"]], abs=6e-4)
    # the produced parameters load into the backend and drive the env
    params = DynamicsParams.load(run / "dynamics_params.json")
    assert params.provenance["scenarios"]["couple"]["transitions"] > 0
    for scenario in ("couple", "family"):
        be = CalibratedModel(scenario, str(run / "dynamics_params.json"))
        np.testing.assert_allclose(be.params.transition, params[scenario].transition)
        env = GroupSupportEnv(scenario, params=str(run / "dynamics_params.json"), horizon=3)
        env.reset(seed=0)
        assert np.isfinite(env.step(0)[1])
    # the saved Hydra config names the run
    assert (run / ".hydra" / "config.yaml").is_file()


def test_rescue_calibrate_on_both_real_slices(real_subset_path, real_more_path, tmp_path):
    """``data.path=[A,B]``: one fit on the subset and the second slice (the three-partner couple
    with all three members), each file named in the provenance with its sha256."""
    import hashlib

    from rescue_cli_helpers import invoke

    run = tmp_path / "both"
    res = invoke(["calibrate", f"hydra.run.dir={run}", f"data.path=[{real_subset_path},{real_more_path}]", "folds=3", "sim_draws=5"])
    assert res.rc == 0, res.err[-3000:]
    assert "aryn_josh_and_lorena/009_s04e09_ct34_segment04' has 3 members (Lorena, Aryn, Josh): fitted on all of them" in res.out
    params = DynamicsParams.load(run / "dynamics_params.json")
    data = params.provenance["data"]
    assert [d["path"] for d in data] == [str(real_subset_path), str(real_more_path)]
    assert [d["dialogues"] for d in data] == [10, 5]
    assert [d["sha256"] for d in data] == [hashlib.sha256(p.read_bytes()).hexdigest() for p in (real_subset_path, real_more_path)]
    both = load_dialogues([real_subset_path, real_more_path])
    assert params.provenance["scenarios"]["couple"]["dialogues"] == sum(d.scenario == "couple" for d in both) == 14
    fid = json.loads((run / "fidelity.json").read_text())
    (couple,) = [s for s in fid["scenarios"] if s["scenario"] == "couple"]
    assert couple["dialogues"] == 14 and math.isfinite(couple["gain_nats"])
    # the couple model simulates two partners: the three-partner session's distress changes are
    # left out by name (its transitions are scored), never simulated on a group cut to two
    assert couple["not_simulated"] == ["aryn_josh_and_lorena/009_s04e09_ct34_segment04 (3 members; the couple model simulates 2)"]
    assert "couple: distress change not simulated for aryn_josh_and_lorena/009_s04e09_ct34_segment04 (3 members" in res.out


def test_rescue_calibrate_scores_a_holdout(real_more_path, tmp_path):
    """``holdout.path=``: fit on data.path (the bundled seeds), score the held-out slice only:
    fidelity.json's ``holdout`` section, per scenario with held-out dialogues."""
    from rescue_cli_helpers import invoke

    run = tmp_path / "held"
    res = invoke(["calibrate", f"hydra.run.dir={run}", f"holdout.path={real_more_path}", "sim_draws=10"])
    assert res.rc == 0, res.err[-3000:]
    fid = json.loads((run / "fidelity.json").read_text())
    assert "kfold" not in fid and list(fid["holdout"]) == ["couple"]  # the slice holds couples only
    held = fid["holdout"]["couple"]
    assert held["dialogues"] == 5 and held["moves"] > 10 and held["transitions"] > 10
    assert set(held["transition_facts"]) == {"pursue_withdraw->repair_softening", "pursue_withdraw->constructive_alignment", "repair_softening->attack_attack"}
    assert (run / "fidelity.png").is_file()


def test_rescue_calibrate_refuses_a_holdout_that_overlaps_the_training_data(real_subset_path, real_more_path, tmp_path):
    """A hold-out sharing sample ids with data.path would score training data as held out:
    exit 2, the shared ids named, nothing written."""
    from rescue_cli_helpers import invoke

    run = tmp_path / "overlap"
    res = invoke(["calibrate", f"hydra.run.dir={run}", f"data.path={real_subset_path}", f"holdout.path=[{real_more_path},{real_subset_path}]"])
    assert res.rc == 2, res.err[-3000:]
    assert "holdout.path shares 10 sample id(s) with data.path" in res.err
    assert "alan_and_evelyn/001_s01e01_ct25_segment04" in res.err and "family_therapy/003/merged" in res.err
    assert not (run / "dynamics_params.json").exists() and not (run / "fidelity.json").exists()


def test_rescue_calibrate_holdout_takes_a_list(real_subset_path, real_more_path, real_extra_path, tmp_path):
    """``holdout.path=[A,B]`` reads both as one hold-out; fidelity.json gains the effects and
    trajectory sections per scenario."""
    from rescue_cli_helpers import invoke

    run = tmp_path / "list"
    res = invoke(["calibrate", f"hydra.run.dir={run}", f"data.path={real_subset_path}", f"holdout.path=[{real_more_path},{real_extra_path}]", "sim_draws=5"])
    assert res.rc == 0, res.err[-3000:]
    fid = json.loads((run / "fidelity.json").read_text())
    assert fid["holdout"]["couple"]["dialogues"] == 14 and fid["holdout"]["family"]["dialogues"] == 8
    for figures in fid["holdout"].values():
        assert figures["effects"] and {"strategy", "n", "real_mean", "real_se", "sim_mean", "z"} == set(figures["effects"][0])
        tr = figures["trajectory"]
        assert tr["horizons"] == [1, 3, 6] and set(tr["coverage_90_worst"]) == {"1", "3", "6"} and tr["windows"] > 0
        assert set(tr["pattern_change_rate"]) == set(tr["stance_drift"]) == {"real", "sim"} and 0 <= tr["pattern_tvd"] <= 1
    assert "Strategy effects" in res.out and "Whole sessions" in res.out
