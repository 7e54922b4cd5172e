"""Run folders know their config: a rerun in a folder with settings that change its results
is refused (nothing in the folder changes), a rerun that only extends it resumes, and
``overwrite=true`` starts it afresh."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rescue_env.experiments.errors import EXIT_USER_ERROR

BASE = ("episodes=2", "agents=[heuristic]", "progress=false", "report=false")


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


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
    fresh = tmp_path / "fresh"
    assert rescue(["rollout", f"hydra.run.dir={fresh}", "seed=1", *BASE]).rc == 0
    run = rescue(["rollout", f"hydra.run.dir={folder}", "seed=1", *BASE, "overwrite=true"])
    assert run.rc == 0, run.err[-2000:]
    assert sigma(folder) == sigma(fresh) != sigma(first_run)
    assert (folder / "episodes.jsonl").read_bytes() == (fresh / "episodes.jsonl").read_bytes()


def test_more_episodes_or_agents_extend_the_folder(rescue, first_run, tmp_path):
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(first_run, folder)
    run = rescue(["rollout", f"hydra.run.dir={folder}", "seed=0", "episodes=3", "agents=[heuristic,never]", "progress=false", "report=false"])
    assert run.rc == 0, run.err[-2000:]
    agents = json.loads((folder / "metrics.json").read_text())["agents"]
    assert set(agents) == {"heuristic", "never"} and agents["heuristic"]["episodes"] == agents["never"]["episodes"] > 0


def test_a_torn_line_in_the_middle_is_cut_with_a_backup_and_redone(rescue, first_run, tmp_path):
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(first_run, folder)
    path = folder / "episodes.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    whole = path.read_bytes()
    middle = len(lines) // 2
    lines[middle] = lines[middle][: len(lines[middle]) // 2] + "\n"  # torn, then more whole lines
    path.write_text("".join(lines), encoding="utf-8")
    run = rescue(["rollout", f"hydra.run.dir={folder}", "seed=0", *BASE])
    assert run.rc == 0, run.err[-2000:]
    assert f"line {middle + 1} is not a whole episode" in run.out + run.err
    (backup,) = folder.glob("episodes.jsonl.cut-*")
    assert backup.read_text(encoding="utf-8") == "".join(lines[middle:])
    # the cut episodes were redone: the same episodes as the first run, once each
    assert sorted(path.read_bytes().splitlines()) == sorted(whole.splitlines())
