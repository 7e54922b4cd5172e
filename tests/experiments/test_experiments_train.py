"""``rescue train``: a tiny run's outputs (model, metrics, checkpoints, namespaced
TensorBoard tags), resume from a checkpoint, PPO, a wrong resume path, and a 2 × 2 sweep."""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

FINAL_AGENTS = {"policy", "never", "random", "heuristic", "imitation"}


def scalar_tags(run_dir: Path) -> dict[str, list]:
    """``{tag: [ScalarEvent...]}`` of every TensorBoard event file under ``run_dir/tb``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, list] = {}
    event_dirs = sorted({f.parent for f in (run_dir / "tb").rglob("events.out.tfevents.*")})
    assert event_dirs, f"no TensorBoard event file under {run_dir / 'tb'}"
    for d in event_dirs:
        acc = EventAccumulator(str(d))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, []).extend(acc.Scalars(tag))
    return out


def test_model_zip_loads_and_plays(train_run):
    from sb3_contrib import MaskablePPO

    from rescue_env.agents import make_agent

    model = MaskablePPO.load(train_run.dir / "model.zip", device="cpu")
    assert model.num_timesteps == 256 and model.action_space.n == 31
    agent = make_agent("maskable_ppo", "couple", policy=str(train_run.dir / "model.zip"))
    from rescue_env.envs.gym_env import GroupSupportEnv

    env = GroupSupportEnv("couple")
    obs, info = env.reset(seed=0)
    assert 0 <= agent.act(obs, info["action_mask"], info["state"]) < 31


def test_metrics_json(train_run):
    m = json.loads((train_run.dir / "metrics.json").read_text())
    assert m["algo"] == "maskable_ppo" and m["seed"] == 0 and m["env_id"] == "rescue_env/Couple-v0"
    assert m["timesteps"] == 256
    assert set(m["final_eval"]) == FINAL_AGENTS
    for name, ev in m["final_eval"].items():
        assert math.isfinite(ev["sigma_return_mean"]) and ev["episodes"] == 2 and len(ev["returns"]) == 2, name
        assert {"sigma_mean_distress", "sigma_stance", "sigma_max_distress", "sigma_intervention_cost", "final_max_distress"} <= set(ev)
    assert m["final_eval"]["never"]["sigma_intervention_cost"] == 0
    hist = m["eval_history"]
    assert hist and [h["timesteps"] for h in hist] == [128, 256]
    assert all(math.isfinite(h["sigma_return_mean"]) for h in hist)
    # held-out dialogues are not trained on
    assert m["eval_dialogues"] and not set(m["eval_dialogues"]) & set(m["train_dialogues"])
    assert Path(m["model"]) == train_run.dir / "model.zip"
    assert "held-out σ* return" in train_run.out and "policy" in train_run.out


def test_checkpoints(train_run):
    names = sorted(p.name for p in (train_run.dir / "checkpoints").glob("*.zip"))
    assert names == ["rl_model_128_steps.zip", "rl_model_256_steps.zip"]


def test_tensorboard_tags_are_namespaced(train_run):
    tags = scalar_tags(train_run.dir)
    prefixes = {t.split("/", 1)[0] + "/" for t in tags}
    assert {"charts/", "losses/", "sigma/"} <= prefixes
    assert not prefixes & {"train/", "rollout/", "time/", "eval/"}, "SB3's own prefixes are renamed"
    assert {"sigma/sigma_return_mean", "sigma/final_max_distress", "sigma/sigma_max_distress"} <= set(tags)
    assert "charts/ep_rew_mean" in tags  # the training VecEnv reports episodes as Monitor does
    assert any(t.startswith("losses/") and "loss" in t for t in tags)
    steps = sorted({e.step for e in tags["sigma/sigma_return_mean"]})
    assert steps == [128, 256]
    assert {"final/sigma_return_mean", "final/paired_vs_heuristic", "final/final_max_distress"} <= set(tags)


def test_hyperparameters_reach_tensorboard_hparams(train_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    found = {}
    for d in {f.parent for f in (train_run.dir / "tb").rglob("events.out.tfevents.*")}:
        acc = EventAccumulator(str(d))
        acc.Reload()
        for content in acc.PluginTagToContent("hparams").values():
            data = plugin_data_pb2.HParamsPluginData.FromString(content)
            if data.HasField("session_start_info"):
                found.update({k: v for k, v in data.session_start_info.hparams.items()})
    assert {"algo", "seed", "learning_rate", "n_envs", "reward.lam"} <= set(found), set(found)
    assert found["algo"].string_value == "maskable_ppo" and found["n_envs"].number_value == 2


def test_final_comparison_is_paired_with_the_heuristic(train_run):
    m = json.loads((train_run.dir / "metrics.json").read_text())
    final = m["final_eval"]
    assert "paired_vs_heuristic" not in final["heuristic"]
    p = final["policy"]["paired_vs_heuristic"]
    diffs = np.subtract(final["policy"]["returns"], final["heuristic"]["returns"])
    assert p["n"] == len(diffs) and p["mean"] == pytest.approx(diffs.mean())
    assert "held-out comparison" in train_run.out and "Δ vs heuristic" in train_run.out
    assert "held-out comparison" in (train_run.dir / "train.log").read_text(encoding="utf-8")


def test_resume_continues_the_step_count(train_run, rescue, tiny_train, tmp_path):
    ckpt = train_run.dir / "checkpoints" / "rl_model_256_steps.zip"
    out = tmp_path / "resumed"
    run = rescue(["train", f"hydra.run.dir={out}", *tiny_train, f"resume={ckpt}", "total_timesteps=384"])
    assert run.rc == 0, run.err[-3000:]
    m = json.loads((out / "metrics.json").read_text())
    assert m["timesteps"] >= 384
    assert m["timesteps"] < 256 + 384, "continued from 256, not restarted from 0"
    assert all(h["timesteps"] > 256 for h in m["eval_history"])
    assert sorted(p.name for p in (out / "checkpoints").glob("*.zip")) == ["rl_model_384_steps.zip"]
    tags = scalar_tags(out)
    assert min(e.step for events in tags.values() for e in events) > 256
    assert "resumed from" in (out / "train.log").read_text()


def test_resume_keeps_the_evaluation_schedule(train_run, rescue, tiny_train, tmp_path):
    ckpt = train_run.dir / "checkpoints" / "rl_model_256_steps.zip"
    out = tmp_path / "resumed_schedule"
    run = rescue(["train", f"hydra.run.dir={out}", *tiny_train, f"resume={ckpt}", "total_timesteps=384"])
    assert run.rc == 0, run.err[-3000:]
    ts = [h["timesteps"] for h in json.loads((out / "metrics.json").read_text())["eval_history"]]
    assert ts
    assert all(b - a >= 64 for a, b in zip(ts, ts[1:])), ts


def test_algo_ppo(rescue, tmp_path):
    from stable_baselines3 import PPO

    out = tmp_path / "ppo"
    run = rescue(["train", f"hydra.run.dir={out}", "algo=ppo", "total_timesteps=128", "n_envs=2", "n_steps=64", "batch_size=64", "eval_freq=128", "eval_episodes=2", "checkpoint_freq=1000"])
    assert run.rc == 0, run.err[-3000:]
    m = json.loads((out / "metrics.json").read_text())
    assert m["algo"] == "ppo" and m["timesteps"] == 128 and "__ppo__" in m["run_name"]
    assert set(m["final_eval"]) == FINAL_AGENTS
    assert type(PPO.load(out / "model.zip", device="cpu")).__name__ == "PPO"


def test_wrong_resume_path_errors_clearly(run_cli, monkeypatch, tiny_train, tmp_path):
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # the CLI rewrites it for Hydra
    missing = tmp_path / "nope" / "rl_model_1_steps.zip"
    out = tmp_path / "bad_resume"
    run = run_cli("train", f"hydra.run.dir={out}", *tiny_train, f"resume={missing}")
    assert run.rc != 0
    assert "resume checkpoint" in run.err and str(missing) in run.err and "does not exist" in run.err
    assert not (out / "model.zip").exists() and not (out / "metrics.json").exists()


def test_unknown_algo_errors(rescue, tiny_train, tmp_path):
    run = rescue(["train", f"hydra.run.dir={tmp_path / 'a'}", *tiny_train, "algo=recurrent_ppo"])
    assert run.rc != 0 and "unknown algo 'recurrent_ppo'" in run.err and "LSTM state" in run.err
    assert "maskable_ppo, ppo, a2c, dqn, qrdqn" in run.err


def test_a_value_based_algo_trains_and_plays_valid_actions(rescue, tmp_path):
    from rescue_env.agents.sb3 import SB3Agent, load_policy
    from rescue_env.envs.gym_env import GroupSupportEnv

    out = tmp_path / "dqn"
    run = rescue(["train", f"hydra.run.dir={out}", "algo=dqn", "total_timesteps=128", "n_envs=2", "batch_size=32",
                  "eval_freq=0", "eval_episodes=2", "checkpoint_freq=1000", "progress=false"])
    assert run.rc == 0, run.err[-3000:]
    m = json.loads((out / "metrics.json").read_text())
    assert m["algo"] == "dqn" and set(m["final_eval"]) == FINAL_AGENTS
    model = load_policy(out / "model.zip")
    assert type(model).__name__ == "DQN"
    env = GroupSupportEnv("couple")
    obs, info = env.reset(seed=0)
    agent = SB3Agent(model, "couple", env.encoding)
    probs = agent.action_probs(obs, info["action_mask"])
    assert probs.sum() == pytest.approx(1.0) and not probs[~info["action_mask"].astype(bool)].any()
    for _ in range(5):
        action = agent.act(obs, info["action_mask"])
        assert info["action_mask"][action]
        obs, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break


def test_sweep_2x2_leaves_one_run_folder_per_job(rescue, tmp_path):
    # The joblib launcher (train's default) with one worker runs the jobs in this process;
    # hydra/launcher=basic does not compose with conf/train.yaml (see test_experiments_config).
    sweep = tmp_path / "sweep"
    run = rescue([
        "train", "-m", "reward.lam=0,1", "seed=0,1", f"hydra.sweep.dir={sweep}", "hydra.launcher.n_jobs=1",
        "total_timesteps=128", "n_envs=2", "n_steps=64", "batch_size=64", "eval_freq=0", "eval_episodes=2", "checkpoint_freq=100000",
    ])
    assert run.rc == 0, run.err[-3000:]
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert [p.name for p in jobs] == ["0", "1", "2", "3"], "job folders are named by job number (jobs.csv is the index)"
    assert (sweep / "multirun.yaml").is_file()
    # the multirun callback summarised the sweep: one row per λ and agent over the 2 seeds
    with (sweep / "summary.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert {(r["reward.lam"], r["agent"]) for r in rows} == {(lam, a) for lam in ("0", "1") for a in FINAL_AGENTS}
    assert all(r["seeds"] == "2" for r in rows)
    assert "grouped by reward.lam" in run.out
    seen = set()

    for job in jobs:
        m = json.loads((job / "metrics.json").read_text())
        cfg = OmegaConf.load(job / ".hydra" / "config.yaml")
        assert m["seed"] == cfg.seed and m["timesteps"] == 128 and set(m["final_eval"]) == FINAL_AGENTS
        assert (job / "model.zip").is_file()
        seen.add((float(cfg.reward.lam), int(cfg.seed)))
    assert seen == {(0.0, 0), (0.0, 1), (1.0, 0), (1.0, 1)}
    # λ changes the reward: same seed, different held-out σ* returns of the never agent
    by = {}
    for j in jobs:
        cfg = OmegaConf.load(j / ".hydra" / "config.yaml")
        by[(float(cfg.reward.lam), int(cfg.seed))] = json.loads((j / "metrics.json").read_text())
    assert not np.isclose(by[(0.0, 0)]["final_eval"]["never"]["sigma_return_mean"], by[(1.0, 0)]["final_eval"]["never"]["sigma_return_mean"])
    assert by[(0.0, 0)]["final_eval"]["never"]["sigma_max_distress"] == 0.0


def test_train_refuses_a_group_the_env_cannot_hold(real_more_path, rescue, tmp_path):
    """Before any env is built: the three-partner "couple" of the second slice is named, not cut."""
    out = tmp_path / "more"
    run = rescue(["train", f"hydra.run.dir={out}", f"data.path={real_more_path}", "total_timesteps=64", "n_envs=1"])
    assert run.rc != 0
    err = run.err + run.out
    assert "aryn_josh_and_lorena/009_s04e09_ct34_segment04' has 3 members" in err and "env.max_members=3" in err
    assert not (out / "model.zip").exists()


def test_the_install_brings_what_the_progress_bar_needs():
    """SB3's progress bar imports tqdm and rich: both are base dependencies (not only
    pulled in by a test extra), so `rescue train` on a terminal works after the README's install."""
    import re
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    names = {re.match(r"[A-Za-z0-9_.\-]+", dep).group(0).lower() for dep in project["dependencies"]}
    assert {"tqdm", "rich"} <= names


def test_rescue_train_on_a_terminal_shows_the_progress_bar_and_exits_0(tiny_train, tmp_path):
    """Run under a pseudo-terminal (stdout is a tty, as for a user; CI's is not), where SB3's
    progress bar is on."""
    import os
    import pty
    import select
    import subprocess

    repo = Path(__file__).resolve().parents[2]
    primary, secondary = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(repo), "COLUMNS": "120", "TERM": "xterm"}
    args = [sys.executable, "-m", "rescue_env.experiments.cli", "train", f"hydra.run.dir={tmp_path / 'run'}", *tiny_train]
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdin=secondary, stdout=secondary, stderr=secondary)
    os.close(secondary)
    output = bytearray()
    while True:  # drain the terminal, or the child blocks once its buffer is full
        ready, _, _ = select.select([primary], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            output += chunk
        elif proc.poll() is not None:
            break
    rc = proc.wait(timeout=600)
    os.close(primary)
    text = output.decode(errors="replace")
    assert rc == 0, text[-3000:]
    assert "ImportError" not in text
    assert "━" in text, "the rich progress bar was drawn (the run saw a terminal)"


def test_held_out_dialogues_are_whole_couples():
    from dataclasses import replace

    from rescue_env.experiments.train import split_dialogues
    from rescue_env.data import load_dialogues

    base = next(d for d in load_dialogues() if d.scenario == "couple")
    ds = [replace(base, sample_id=f"{c}/{k:03d}_s", participants=[f"{c}A", f"{c}B"]) for c in "pqrst" for k in range(3)]
    train, held = split_dialogues(ds, 0.34)
    couples = lambda xs: {d.sample_id.split("/")[0] for d in xs}  # noqa: E731
    assert held and train and not couples(train) & couples(held)
    assert split_dialogues(ds, 0.34) == (train, held)  # fixed across seeds


def test_group_k_fold_holds_out_every_dialogue_once_with_couples_whole():
    """``holdout_fold=i holdout_folds=k``: the k folds' held-out sets partition the dialogues,
    a couple's sessions in one fold, each fold's training set the rest; too few couples for the
    folds, or a fold out of range, is a clear error."""
    from dataclasses import replace

    from rescue_env.data import load_dialogues
    from rescue_env.experiments.errors import ConfigError
    from rescue_env.experiments.train import split_dialogues

    base = next(d for d in load_dialogues() if d.scenario == "couple")
    ds = [replace(base, sample_id=f"{c}/{k:03d}_s", participants=[f"{c}A", f"{c}B"]) for c, n in zip("pqrstu", (4, 1, 2, 3, 1, 1)) for k in range(n)]
    couples = lambda xs: {d.sample_id.split("/")[0] for d in xs}  # noqa: E731
    held_all = []
    for fold, expected in enumerate(({"p"}, {"s", "t"}, {"q", "r", "u"})):
        train, held = split_dialogues(ds, 0.34, fold, 3)
        # the folds are balanced in dialogues (4, 3 + 1, 1 + 2 + 1), ties broken the same way on
        # every install (a fold's jobs on two machines must hold out the same couples)
        assert couples(held) == expected and couples(train) == set("pqrstu") - expected and len(train) + len(held) == len(ds)
        held_all += [d.sample_id for d in held]
    assert sorted(held_all) == sorted(d.sample_id for d in ds)
    with pytest.raises(ConfigError, match="hold 6 couples or families, fewer than the folds"):
        split_dialogues(ds, 0.34, 0, 7)
    with pytest.raises(ConfigError, match="at least 2 couples or families"):
        split_dialogues([d for d in ds if d.sample_id.startswith("p/")], 0.34, 0, 2)
    with pytest.raises(ConfigError, match="holdout_fold=3 is out of range"):
        split_dialogues(ds, 0.34, 3, 3)


def test_grounded_run_records_both_axes(real_more_path, rescue, tmp_path):
    """experiment=grounded on real couples: behaviour cloning, the KL penalty, the σ* margin
    over the heuristic and agreement with real therapists on held-out real dialogues."""
    from rescue_env.agents.prior import BehaviourPrior

    out = tmp_path / "grounded"
    args = ["experiment=grounded", f"data.path={real_more_path}", "env.max_members=3", "total_timesteps=128", "n_envs=2", "n_steps=64",
            "batch_size=64", "eval_freq=0", "eval_episodes=2", "checkpoint_freq=1000", "prior.bc_epochs=2", "prior.coef=0.3", "prior.demo_coef=0.1",
            "prior.real_coef=0.5"]  # fmt: skip
    run = rescue(["train", f"hydra.run.dir={out}", *args])
    assert run.rc == 0, run.err[-3000:]
    m = json.loads((out / "metrics.json").read_text())
    assert m["sigma_margin_vs_heuristic"] == m["final_eval"]["policy"]["paired_vs_heuristic"]["mean"]
    g = m["grounding"]
    assert g["coef"] == 0.3 and g["bc"]["moves"] > 10 and Path(g["path"]) == out / "prior.json"
    BehaviourPrior.load(out / "prior.json").scenario("couple")
    agree = m["real_agreement"]
    assert set(agree["dialogues"]) == set(m["eval_dialogues"])
    for who in ("policy", "prior", "majority"):
        assert {"itp_f1", "stp_r1", "ssp_r1"} <= set(agree[who]) and agree[who]["n"]["stp"] > 0
    assert "agreement with real therapists" in run.out + run.err
    assert g["demo_coef"] == 0.1 and g["real_coef"] == 0.5
    # the policy's moves in the simulator, beside its answers on real states
    sim = m["sim_agreement"]
    assert sim["moves"] > 0 and sum(sim["target_roles"].values()) == pytest.approx(100.0) and sum(sim["strategies"].values()) == pytest.approx(100.0)
    assert set(sim["target_roles"]) <= {"speaker1", "other", "dyad", "group"} and 0 <= sim["prior_target_r1"] <= 100
    assert f"in the simulator (held-out dialogues): the policy spoke {sim['moves']} times" in run.out + run.err
    # summarize puts both axes and the majority's level on the policy's row, and draws them
    run = rescue(["summarize", str(out)])
    assert run.rc == 0, run.err[-2000:]
    row = next(r for r in json.loads((out / "summary.json").read_text())["rows"] if r["agent"] == "policy")
    assert row["stp_r1"] == agree["policy"]["stp_r1"] and row["majority_ssp_r1"] == agree["majority"]["ssp_r1"]
    assert row["sim_target_r1"] == sim["prior_target_r1"] and row["sim_strategy_r1"] == sim["prior_strategy_r1"]
    assert "sim target" in run.out
    assert (out / "frontier.png").stat().st_size > 0 and "frontier.png" in run.out
    # a saved prior is read, not refitted
    again = tmp_path / "again"
    run = rescue(["train", f"hydra.run.dir={again}", *args, f"prior.path={out / 'prior.json'}"])
    assert run.rc == 0, run.err[-3000:]
    assert json.loads((again / "metrics.json").read_text())["grounding"]["path"] == str(out / "prior.json")
    assert not (again / "prior.json").exists()


def test_a_saved_prior_that_saw_the_held_out_dialogues_is_refused_for_agreement(real_more_path, real_more_dialogues, rescue, tmp_path):
    """prior.path fitted on every couple (say, from another fold's run): scoring its agreement
    on this run's held-out couples would score it on its own training data."""
    from rescue_env.agents.prior import BehaviourPrior

    saved = BehaviourPrior.fit(real_more_dialogues, ["couple"]).save(tmp_path / "all.json")
    args = ["train", "experiment=grounded", f"data.path={real_more_path}", "env.max_members=3", "total_timesteps=128", "n_envs=2",
            "n_steps=64", "batch_size=64", "eval_freq=0", "eval_episodes=2", "prior.bc_epochs=1", f"prior.path={saved}"]
    run = rescue([*args, f"hydra.run.dir={tmp_path / 'a'}"])
    assert run.rc == 2 and "held-out dialogues" in run.err and "prior.agreement=false" in run.err and "Traceback" not in run.err
    assert not (tmp_path / "a" / "model.zip").exists()
    # without agreement it trains (the σ* evaluation is said to start from dialogues the prior saw)
    run = rescue([*args, f"hydra.run.dir={tmp_path / 'b'}", "prior.agreement=false"])
    assert run.rc == 0, run.err[-2000:]
    assert "the prior has seen" in run.err + run.out


def test_a_grounded_run_on_the_bundled_seeds_does_not_call_them_real(rescue, tiny_train, tmp_path):
    run = rescue(["train", f"hydra.run.dir={tmp_path / 'b'}", *tiny_train, "experiment=grounded", "prior.bc_epochs=1", "eval_freq=0"])
    assert run.rc == 0, run.err[-2000:]
    said = run.out + run.err
    assert "agreement with the bundled seeds' therapist" in said and "data.path=[...]" in said and "real therapists" not in said


def test_grounding_needs_maskable_ppo(rescue, tiny_train, tmp_path):
    run = rescue(["train", f"hydra.run.dir={tmp_path / 'x'}", *tiny_train, "algo=ppo", "prior.coef=0.1"])
    assert run.rc == 2 and "prior.coef=0.1" in run.err and "needs algo=maskable_ppo" in run.err


def test_a_negative_real_coef_is_refused(rescue, tiny_train, tmp_path):
    run = rescue(["train", f"hydra.run.dir={tmp_path / 'y'}", *tiny_train, "prior.real_coef=-1", "prior.coef=0.1"])
    assert run.rc == 2 and "real_coef" in run.err + run.out and "Traceback" not in run.err
