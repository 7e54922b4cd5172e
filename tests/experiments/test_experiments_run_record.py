"""Run folders know their config: a rerun in a folder with settings that change its results
is refused (nothing in the folder changes), a rerun that only extends it resumes, and
``overwrite=true`` starts it afresh."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rescue_env.experiments.errors import EXIT_USER_ERROR
from rescue_env.jsonl import decode, read_text, split_lines
from rescue_env.rollout import EPISODES_GZ, EPISODES_PLAIN, episodes_file

BASE = ("episodes=2", "agents=[heuristic]", "progress=false", "report=false")


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def as_plain(folder: Path) -> Path:
    """The folder's gzip episodes file made the plain ``episodes.jsonl`` of an older version."""
    plain = folder / EPISODES_PLAIN
    plain.write_bytes(decode((folder / EPISODES_GZ).read_bytes()).data)
    (folder / EPISODES_GZ).unlink()
    return plain


def sigma(folder: Path) -> float:
    return json.loads((folder / "metrics.json").read_text())["agents"]["heuristic"]["sigma_return_mean"]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory) -> Path:
    from rescue_cli_helpers import invoke

    out = tmp_path_factory.mktemp("record") / "run"
    run = invoke(["rollout", f"hydra.run.dir={out}", "seed=0", *BASE])
    assert run.rc == 0, run.err[-2000:]
    return out


@pytest.mark.parametrize(("override", "key"), [("seed=1", "seed"), ("reward.lam=0", "reward.lam"), ("env.horizon=10", "env.horizon")])
def test_a_rerun_with_other_settings_is_refused_and_changes_nothing(rescue, first_run, override, key):
    before = snapshot(first_run)
    run = rescue(["rollout", f"hydra.run.dir={first_run}", "seed=0", *BASE, override])
    assert run.rc == EXIT_USER_ERROR, run.err[-2000:]
    assert f"differing: {key}" in run.err and "hydra.run.dir=" in run.err and "overwrite=true" in run.err
    assert snapshot(first_run) == before, "not even .hydra/config.yaml was rewritten"


def test_an_llm_rerun_with_another_model_is_refused(rescue, tmp_path):
    out = tmp_path / "run"
    args = ["rollout", f"hydra.run.dir={out}", "agents=[llm]", "llm.base_url=http://127.0.0.1:9/v1", "llm.max_retries=0",
            "llm.model=model-a", "episodes=1", "progress=false", "report=false"]
    assert rescue(args).rc == 3  # nothing listens: every episode failed, but the folder is recorded
    run = rescue([*args[:-3], "llm.model=model-b", *args[-2:]])
    assert run.rc == EXIT_USER_ERROR and "llm.model" in run.err


def test_overwrite_starts_afresh_and_matches_a_fresh_folder(rescue, first_run, tmp_path):
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(first_run, folder)
    as_plain(folder)  # an older version's folder: its plain file goes too
    fresh = tmp_path / "fresh"
    assert rescue(["rollout", f"hydra.run.dir={fresh}", "seed=1", *BASE]).rc == 0
    run = rescue(["rollout", f"hydra.run.dir={folder}", "seed=1", *BASE, "overwrite=true"])
    assert run.rc == 0, run.err[-2000:]
    assert sigma(folder) == sigma(fresh) != sigma(first_run)
    assert not (folder / EPISODES_PLAIN).exists()
    assert (folder / EPISODES_GZ).read_bytes() == (fresh / EPISODES_GZ).read_bytes()


def test_more_episodes_or_agents_extend_the_folder(rescue, first_run, tmp_path):
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(first_run, folder)
    run = rescue(["rollout", f"hydra.run.dir={folder}", "seed=0", "episodes=3", "agents=[heuristic,never]", "progress=false", "report=false"])
    assert run.rc == 0, run.err[-2000:]
    agents = json.loads((folder / "metrics.json").read_text())["agents"]
    assert set(agents) == {"heuristic", "never"} and agents["heuristic"]["episodes"] == agents["never"]["episodes"] > 0


@pytest.mark.parametrize("form", ["gzip", "plain"])
def test_a_torn_line_in_the_middle_is_cut_with_a_backup_and_redone(rescue, first_run, tmp_path, form):
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(first_run, folder)
    path = episodes_file(folder) if form == "gzip" else as_plain(folder)
    raw = path.read_bytes()
    before = sorted(split_lines(read_text(path)))
    # the file's pieces: its lines, or its gzip members (one per episode)
    ends = [end for end, _ in decode(raw).members] if form == "gzip" else [i + 1 for i, b in enumerate(raw) if b == ord("\n")]
    pieces = [raw[start:end] for start, end in zip([0, *ends[:-1]], ends)]
    middle = len(pieces) // 2
    pieces[middle] = pieces[middle][: len(pieces[middle]) // 2] + (b"\n" if form == "plain" else b"")  # torn, then more whole ones
    path.write_bytes(b"".join(pieces))
    run = rescue(["rollout", f"hydra.run.dir={folder}", "seed=0", *BASE])
    assert run.rc == 0, run.err[-2000:]
    assert f"line {middle + 1} is not a whole episode" in run.out + run.err
    (backup,) = folder.glob(f"{path.name}.cut-*")
    assert backup.read_bytes() == b"".join(pieces[middle:])
    # the cut episodes were redone: the same episodes as the first run, once each, in the folder's form
    assert episodes_file(folder) == path and sorted(split_lines(read_text(path))) == before


def test_a_trained_model_is_never_replaced_by_a_run_with_other_settings(rescue, tiny_train, tmp_path):
    """``rescue train`` replaces its folder's model and metrics on a rerun: with other settings
    (or no record of the old ones) it is refused and nothing changes; the same settings, a
    longer run or ``overwrite=true`` go ahead."""
    out = tmp_path / "train"
    args = ["train", f"hydra.run.dir={out}", *tiny_train]
    assert rescue([*args, "seed=0"]).rc == 0
    before = snapshot(out)
    run = rescue([*args, "seed=1"])
    assert run.rc == EXIT_USER_ERROR and "differing: seed" in run.err and "overwrite=true" in run.err
    assert snapshot(out) == before
    # presentation and the run's extent do not define its results
    assert rescue([*args, "seed=0", "progress=false", "total_timesteps=384"]).rc == 0
    # a folder of an older version (no record) holding a model
    (out / "train_config.json").unlink()
    before = snapshot(out)
    run = rescue([*args, "seed=1"])
    assert run.rc == EXIT_USER_ERROR and "without a record" in run.err and "model.zip" in run.err
    assert snapshot(out) == before
    assert rescue([*args, "seed=1", "overwrite=true"]).rc == 0
    assert json.loads((out / "train_config.json").read_text())["seed"] == 1
    # starting afresh never removes the model it was told to resume from
    before = snapshot(out)
    run = rescue([*args, "seed=1", "overwrite=true", f"resume={out / 'model.zip'}"])
    assert run.rc == EXIT_USER_ERROR and "which this run reads" in run.err and "model.zip" in run.err
    assert snapshot(out) == before
    assert rescue([*args, "seed=1", f"resume={out / 'model.zip'}", "total_timesteps=512"]).rc == 0  # continuing it is fine
