"""``rescue summarize``: a fixture sweep's table against hand computations (mean ± t-interval
across seeds, IQM, the paired Δ), the index and the outputs; and a real 2-job sweep through
``hydra/launcher=submitit_local`` (the SLURM code path) summarised by the multirun callback."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rescue_env.experiments.summarize import main as summarize_main
from rescue_env.experiments.summarize import summarize


def fake_train_job(folder: Path, overrides: list[str], policy: float, heuristic: float, delta: float) -> None:
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides), encoding="utf-8")
    final = {
        "policy": {"sigma_return_mean": policy, "paired_vs_heuristic": {"mean": delta, "ci_low": delta - 1, "ci_high": delta + 1, "n": 10}},
        "heuristic": {"sigma_return_mean": heuristic},
    }
    (folder / "metrics.json").write_text(json.dumps({"final_eval": final}), encoding="utf-8")


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """reward.lam ∈ {0, 1} × seed ∈ {0..3}; one unfinished job."""
    policy = {"0": [1.0, 2.0, 3.0, 100.0], "1": [-4.0, -2.0, -3.0, -5.0]}
    job = 0
    for lam in ("0", "1"):
        for seed in range(4):
            fake_train_job(tmp_path / str(job), [f"reward.lam={lam}", f"seed={seed}", "hydra.launcher.n_jobs=2"],
                           policy[lam][seed], -10.0, policy[lam][seed] + 10.0 - seed)
            job += 1
    (tmp_path / str(job) / ".hydra").mkdir(parents=True)
    (tmp_path / str(job) / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["reward.lam=2", "seed=0"]), encoding="utf-8")
    return tmp_path


def test_groups_by_the_swept_keys_and_aggregates_seeds(sweep: Path):
    result = summarize(sweep, reps=300, plot=False)
    assert result["swept"] == ["reward.lam", "seed"] and result["group_by"] == ["reward.lam"]
    rows = {(r["reward.lam"], r["agent"]): r for r in result["rows"]}
    assert set(rows) == {("0", "policy"), ("0", "heuristic"), ("1", "policy"), ("1", "heuristic")}
    r = rows["0", "policy"]
    assert r["seeds"] == 4 and r["mean"] == pytest.approx(26.5)
    # sd of (1, 2, 3, 100) = 49.0068; t(0.975, 3) = 3.182446; half-width = 3.182446 · 49.0068 / 2
    assert r["ci95"] == pytest.approx(3.182446 * 49.006802 / 2, rel=1e-5)
    # IQM: the middle half (2, 3) — the outlying seed does not move it
    assert r["iqm"] == pytest.approx(2.5)
    assert r["iqm_ci_low"] <= r["iqm"] <= r["iqm_ci_high"]
    # paired Δ: each job's own Δ (policy + 10 − seed), averaged across seeds
    assert r["delta_mean"] == pytest.approx(26.5 + 10 - 1.5) and r["delta_seeds"] == 4
    assert rows["1", "heuristic"]["ci95"] == 0.0 and rows["1", "heuristic"]["delta_seeds"] == 0


def test_writes_the_table_the_index_and_the_plot(sweep: Path, capsys):
    assert summarize_main([str(sweep), "--reps", "200"]) == 3  # a job without metrics: not the whole sweep
    out = capsys.readouterr().out
    assert "grouped by reward.lam" in out and "skipped 8: no metrics.json" in out
    assert max(len(line) for line in out.splitlines() if str(sweep) not in line) <= 100
    with (sweep / "summary.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["reward.lam"], r["agent"]) for r in rows] == [("0", "policy"), ("0", "heuristic"), ("1", "policy"), ("1", "heuristic")]
    assert float(rows[0]["mean"]) == pytest.approx(26.5) and float(rows[0]["iqm"]) == pytest.approx(2.5)
    with (sweep / "jobs.csv").open(newline="", encoding="utf-8") as fh:
        index = list(csv.DictReader(fh))
    assert [j["job"] for j in index] == [str(i) for i in range(9)]
    assert index[0]["reward.lam"] == "0" and index[5]["seed"] == "1" and index[8]["status"].startswith("no metrics.json")
    assert (sweep / "summary.png").read_bytes().startswith(b"\x89PNG")
    assert json.loads((sweep / "summary.json").read_text())["group_by"] == ["reward.lam"]
    assert f"wrote summary.csv, summary.json, jobs.csv, summary.png in {sweep}" in out  # no agreement: no frontier
    # the closing line names only what was written
    (sweep / "summary.png").unlink()
    summarize_main([str(sweep), "--reps", "200", "--no-plot"])
    assert f"wrote summary.csv, summary.json, jobs.csv in {sweep}" in capsys.readouterr().out and not (sweep / "summary.png").exists()


def test_a_folder_without_runs_is_a_clear_error(tmp_path: Path, capsys):
    assert summarize_main([str(tmp_path)]) == 2
    assert "rescue summarize: error: no run under" in capsys.readouterr().err
    assert summarize_main([str(tmp_path / "nowhere")]) == 2


def fake_rollout_job(folder: Path, seed: int, llm: float, failed: int, episodes: int = 9) -> None:
    """A rollout job's folder: llm and heuristic over ``episodes`` each, ``failed`` of the
    llm's failed (its mean covers the others only); the paired Δ to the heuristic is null
    when undefined, as metrics.json writes it."""
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"seed={seed}", "agents=[heuristic,llm]"]), encoding="utf-8")
    agents = {
        "heuristic": {"episodes": episodes, "failed": 0, "sigma_return_mean": -5.0, "sigma_return_ci95": 1.0},
        "llm": {"episodes": episodes, "failed": failed, "sigma_return_mean": llm, "sigma_return_ci95": None,
                "paired": {"mean": llm + 5.0, "ci_low": None, "ci_high": None, "n": episodes - failed}},
    }
    (folder / "metrics.json").write_text(json.dumps({"compare_to": "heuristic", "agents": agents}), encoding="utf-8")


def test_a_job_with_failed_episodes_is_shown_and_left_out_of_the_means(tmp_path: Path, capsys):
    """Seed 1's LLM episodes partly failed (5 of 9; the job exited 3): its 4 episodes must not
    be averaged with seed 0's full set as if it were a whole job."""
    fake_rollout_job(tmp_path / "0", 0, llm=-2.0, failed=0)
    fake_rollout_job(tmp_path / "1", 1, llm=9.0, failed=5)
    assert summarize_main([str(tmp_path), "--reps", "100", "--no-plot"]) == 3
    out = capsys.readouterr().out
    assert "left out 1: 5 of 18 episodes failed" in out and "--include-failed" in out
    assert "failed eps" in out and "jobs left out" in out
    result = json.loads((tmp_path / "summary.json").read_text())
    rows = {r["agent"]: r for r in result["rows"]}
    assert rows["llm"]["seeds"] == 1 and rows["llm"]["mean"] == pytest.approx(-2.0) and rows["llm"]["jobs_left_out"] == 1
    assert [(j["path"], j["failed"], j["pooled"]) for j in result["jobs"]] == [("0", 0, True), ("1", 5, False)]
    with (tmp_path / "jobs.csv").open(newline="", encoding="utf-8") as fh:
        index = {j["job"]: j for j in csv.DictReader(fh)}
    assert (index["1"]["failed"], index["1"]["pooled"], index["1"]["status"]) == ("5", "False", "5 of 18 episodes failed")

    assert summarize_main([str(tmp_path), "--reps", "100", "--no-plot", "--include-failed"]) == 3
    assert "kept 1 in the means (--include-failed)" in capsys.readouterr().out
    rows = {r["agent"]: r for r in json.loads((tmp_path / "summary.json").read_text())["rows"]}
    assert rows["llm"]["seeds"] == 2 and rows["llm"]["mean"] == pytest.approx(3.5) and rows["llm"]["failed"] == 5


def test_summary_json_is_strict_json(sweep: Path):
    """Undefined figures (an interval of one seed) are null, never NaN."""
    summarize(sweep, reps=50, plot=False)
    text = (sweep / "summary.json").read_text()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c} in summary.json"))


def test_submitit_local_sweep_is_summarised_by_the_callback(tmp_path: Path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    exe = Path(sys.executable).with_name("rescue")
    if not exe.exists():
        pytest.skip(f"console script not installed beside {sys.executable}")
    sweep = tmp_path / "sweep"
    # a process of its own, as on a cluster's login node: submitit starts one process per job
    proc = subprocess.run(
        [str(exe), "rollout", "-m", "hydra/launcher=submitit_local", f"hydra.sweep.dir={sweep}", "hydra.launcher.timeout_min=10",
         "episodes=1", "agents=[never,heuristic]", "env=couple", "report=false", "progress=false", "seed=0,1"],
        capture_output=True, text=True, timeout=400, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "grouped by nothing (seeds only)" in proc.stdout, proc.stdout[-2000:]
    for job in ("0", "1"):
        m = json.loads((sweep / job / "metrics.json").read_text())
        assert m["seed"] == int(job) and m["agents"]["never"]["episodes"] == 6
        assert (sweep / job / "rollout.log").read_text(encoding="utf-8").count("σ* return") == 1, "the job log holds the summary"
    with (sweep / "summary.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["agent"], r["seeds"]) for r in rows] == [("never", "2"), ("heuristic", "2")]
    never = json.loads((sweep / "summary.json").read_text())["rows"][0]
    per_seed = [json.loads((sweep / j / "metrics.json").read_text())["agents"]["never"]["sigma_return_mean"] for j in ("0", "1")]
    assert never["mean"] == pytest.approx(sum(per_seed) / 2) and math.isfinite(never["delta_mean"])
    assert (sweep / "multirun.yaml").is_file()


def test_jobs_with_the_same_setting_group_together_however_it_was_written(tmp_path: Path):
    """``prior.strategy_coef=null`` given, or left at its default of null, or ``lam=1`` against
    ``lam=1.0``: one setting, one group (they were two rows); a different value stays apart."""
    def job(n: int, overrides: list[str], strategy_coef: float | None, policy: float) -> None:
        fake_train_job(tmp_path / str(n), overrides, policy, -10.0, policy + 10.0)
        config = {"seed": n, "prior": {"coef": 0.1, "strategy_coef": strategy_coef}}
        (tmp_path / str(n) / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")

    job(0, ["seed=0", "prior.strategy_coef=null"], None, 1.0)
    job(1, ["seed=1"], None, 3.0)
    job(2, ["seed=2", "prior.strategy_coef=0.1"], 0.1, 5.0)
    job(3, ["seed=3", "prior.strategy_coef=.1"], 0.1, 7.0)
    result = summarize(tmp_path, reps=100, plot=False)
    assert result["group_by"] == ["prior.strategy_coef"]
    policy = {r["prior.strategy_coef"]: (r["seeds"], r["mean"]) for r in result["rows"] if r["agent"] == "policy"}
    assert policy == {"null": (2, pytest.approx(2.0)), "0.1": (2, pytest.approx(6.0))}


def test_a_weight_that_follows_prior_coef_groups_with_the_same_number_written_out(tmp_path: Path):
    """experiment=grounded saves ``strategy_coef: ${rescue.times:${prior.coef},0.1}``: at
    prior.coef=0.3 it is the 0.03 another sweep gave by hand, one setting; at 0.1 another."""
    def job(n: int, overrides: list[str], prior: dict, policy: float) -> None:
        fake_train_job(tmp_path / str(n), overrides, policy, -10.0, policy + 10.0)
        config = {"seed": n % 2, "out": "${hydra:runtime.output_dir}", "prior": prior}
        (tmp_path / str(n) / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")

    knob = {"strategy_coef": "${rescue.times:${prior.coef},0.1}", "real_coef": "${prior.coef}"}
    job(0, ["seed=0", "prior.coef=0.3"], {"coef": 0.3, **knob}, 1.0)
    job(1, ["seed=1", "prior.coef=0.3", "prior.strategy_coef=0.03", "prior.real_coef=0.3"], {"coef": 0.3, "strategy_coef": 0.03, "real_coef": 0.3}, 3.0)
    job(2, ["seed=0", "prior.coef=0.1"], {"coef": 0.1, **knob}, 5.0)
    job(3, ["seed=1", "prior.coef=0.1", "prior.strategy_coef=0.03"], {"coef": 0.1, **knob, "strategy_coef": 0.03}, 7.0)
    result = summarize(tmp_path, reps=100, plot=False)
    assert result["group_by"] == ["prior.coef", "prior.strategy_coef", "prior.real_coef"]
    policy = {tuple(r[k] for k in result["group_by"]): (r["seeds"], r["mean"]) for r in result["rows"] if r["agent"] == "policy"}
    assert policy == {("0.3", "0.03", "0.3"): (2, pytest.approx(2.0)), ("0.1", "0.01", "0.1"): (1, pytest.approx(5.0)),
                      ("0.1", "0.03", "0.1"): (1, pytest.approx(7.0))}
    # rows go by value, whatever order the folders came in
    assert list(policy) == [("0.1", "0.01", "0.1"), ("0.1", "0.03", "0.1"), ("0.3", "0.03", "0.3")]
    # an interpolation only its run can resolve is compared as written
    from rescue_env.experiments.summarize import read_job

    assert read_job(tmp_path / "0").setting("out") == json.dumps("${hydra:runtime.output_dir}")


def test_the_folds_of_a_group_k_fold_combine_per_seed_and_agreement_pools_by_instances(tmp_path: Path):
    """``holdout_fold`` jobs: a seed's folds combine into one cross-validated score (σ* and Δ
    the folds' mean; R@1 right answers over all the folds' instances, not the mean of folds of
    different sizes); seeds are then aggregated as usual, and a plain-split job in the same
    folder stays in a group of its own."""
    n = 0

    def job(overrides: list[str], fold: int, seed: int, instances: int, stp: float) -> None:
        nonlocal n
        fake_train_job(tmp_path / str(n), overrides, 1.0 + fold + seed, -1.0, 2.0 + fold + 2 * seed)
        m = json.loads((tmp_path / str(n) / "metrics.json").read_text())
        fig = {"itp_f1": 60.0, "stp_r1": stp, "ssp_r1": 10.0, "n": {"itp": 100, "stp": instances, "ssp": instances}}
        m["real_agreement"] = {"dialogues": [], "policy": fig, "prior": fig, "majority": {**fig, "stp_r1": 25.0}}
        (tmp_path / str(n) / "metrics.json").write_text(json.dumps(m))
        n += 1

    for coef in ("0.03", "0.1"):
        for fold, (instances, stp) in enumerate(((80, 50.0), (20, 100.0))):
            for seed in range(2):
                job([f"prior.coef={coef}", f"holdout_fold={fold}", f"seed={seed}"], fold, seed, instances, stp)
    job(["prior.coef=0.03", "seed=0"], 0, 0, 50, 0.0)  # the plain holdout split
    result = summarize(tmp_path, reps=100, plot=False)
    assert result["group_by"] == ["prior.coef", "split"]
    policy = {(r["prior.coef"], r["split"]): r for r in result["rows"] if r["agent"] == "policy"}
    assert set(policy) == {("0.03", "k-fold"), ("0.1", "k-fold"), ("0.03", "holdout")}
    r = policy["0.03", "k-fold"]
    # two seeds of two folds each: per seed Δ = mean(2 + 2s, 3 + 2s); across seeds 3.5
    assert r["seeds"] == 2 and r["folds"] == 2 and r["values"] == [1.5, 2.5] and r["delta_mean"] == pytest.approx(3.5)
    # (80 · 50 % + 20 · 100 %) / 100 = 60 %, where the mean of the folds would say 75 %
    assert r["stp_r1"] == pytest.approx(60.0) and r["majority_stp_r1"] == pytest.approx(25.0)
    plain = policy["0.03", "holdout"]
    assert plain["seeds"] == 1 and plain["folds"] == 0 and plain["stp_r1"] == 0.0


def test_a_rerun_of_the_same_seed_is_named(tmp_path: Path, caplog):
    """Two jobs of one setting and one seed (a rerun in another folder) are not two seeds'
    evidence: the summary says so."""
    for n, seed in enumerate((0, 0, 1)):
        fake_train_job(tmp_path / str(n), [f"seed={seed}", "reward.lam=1"], 1.0 + n, -10.0, 11.0 + n)
    with caplog.at_level("WARNING"):
        summarize(tmp_path, reps=50, plot=False)
    assert "2 jobs of one setting with the same seed=0" in caplog.text and "keep one" in caplog.text
