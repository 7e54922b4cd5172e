"""Bad input to the ``rescue`` commands: one clear line, exit code 2, and nothing written;
keys refused wherever a config could carry them; honest exit codes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rescue_env.experiments.errors import EXIT_SOME_FAILED, EXIT_USER_ERROR

ROLLOUT = ("episodes=1", "agents=[never]", "progress=false", "report=false")


def assert_refused(run, *needles: str) -> None:
    """Exit 2, one line on stderr naming the problem, no traceback."""
    assert run.rc == EXIT_USER_ERROR, (run.rc, run.err[-2000:])
    lines = [line for line in run.err.splitlines() if line.strip()]
    assert len(lines) == 1, run.err
    assert "Traceback" not in run.err and "Error executing job" not in run.err
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("reward.lam=-5", "reward.lam=-5.0 is out of range"),
        ("reward.gamma=7", "reward.gamma=7.0 is out of range"),
        ("reward.beta=-1", "reward.beta"),
        ("agents=[]", "agents=[] names no agent"),
        ("agents=[bogus]", "unknown agent 'bogus'"),
        ("episodes=-1", "episodes=-1 is out of range"),
        ("env.horizon=0", "env horizon must be an integer ≥ 1, got 0"),
        ("env.scenario=triad", "unknown scenario 'triad'"),
        ("llm.max_concurrency=0", "llm.max_concurrency=0"),
        ("llm.call_timeout_s=0", "llm.call_timeout_s=0"),
        ("dynamics.name=magic", "dynamics.name='magic'"),
    ],
)
def test_nonsense_rollout_settings_are_refused_before_anything_is_written(rescue, tmp_path, override, needle):
    out = tmp_path / "run"
    assert_refused(rescue(["rollout", f"hydra.run.dir={out}", *ROLLOUT, override]), needle)
    assert not out.exists(), "refused before Hydra created the run folder"


@pytest.mark.parametrize(
    ("command", "override", "needle"),
    [
        ("train", "total_timesteps=-5", "total_timesteps=-5 is out of range"),
        ("train", "algo=recurrent_ppo", "unknown algo 'recurrent_ppo'"),
        ("train", "holdout_fold=4", "holdout_fold=4 is out of range: expected holdout_fold >= 0 and holdout_fold <= 3"),
        ("train", "holdout_folds=1", "holdout_folds=1 is out of range: expected holdout_folds >= 2"),
        ("calibrate", "folds=0", "folds=0 is out of range: expected folds >= 2"),
    ],
)
def test_nonsense_train_and_calibrate_settings_are_refused(rescue, tmp_path, command, override, needle):
    out = tmp_path / "run"
    assert_refused(rescue([command, f"hydra.run.dir={out}", override]), needle)
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["eval-tasks", "predictor=bogus"], "predictor='bogus' is not one of"),
        (["eval-tasks", "tasks=[xyz]"], "unknown task 'xyz'"),
        (["eval-tasks", "llm.temperature=-1"], "llm.temperature=-1.0 is out of range"),
        (["judge", "scorer=bogus"], "scorer='bogus'"),
        (["judge", "modes=[]"], "modes=[]"),
        (["judge", "llm.max_tokens=0"], "llm.max_tokens=0 is out of range"),
        (["judge", "run_dir=/nonexistent/rollout"], "no episodes.jsonl.gz or episodes.jsonl there"),
    ],
)
def test_eval_tasks_and_judge_settings_are_checked_at_composition(rescue, tmp_path, args, needle):
    out = tmp_path / "run"
    assert_refused(rescue([args[0], f"hydra.run.dir={out}", *args[1:]]), needle)
    assert not out.exists()


def test_a_hydra_composition_error_is_a_user_error(rescue, tmp_path):
    run = rescue(["rollout", f"hydra.run.dir={tmp_path / 'r'}", "episodes=abc"])
    assert run.rc == EXIT_USER_ERROR and "episodes=abc" in run.err and "Traceback" not in run.err


def test_hydra_full_error_still_shows_the_traceback(rescue, tmp_path):
    run = rescue(["rollout", f"hydra.run.dir={tmp_path / 'r'}", "reward.lam=-5"], env={"HYDRA_FULL_ERROR": "1"})
    assert run.rc != 0 and "Traceback" in run.err and "lam" in run.err


@pytest.mark.parametrize("command", [["rollout", *ROLLOUT], ["calibrate"], ["eval-tasks", "tasks=[itp]", "progress=false"]])
def test_data_errors_are_one_clear_line_without_traceback(rescue, tmp_path, command):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"sample_id": "x/1", "scenario": "couple", "participants": "Alan, Evelyn", "rows": '
                   '[{"primary_speaker": "Alan", "dialogue_cleaned": "Hi."}, {"primary_speaker": "Evelyn", "dialogue_cleaned": "Hey."}]}\n')
    run = rescue([command[0], f"hydra.run.dir={tmp_path / 'r'}", f"data.path={bad}", *command[1:]])
    assert run.rc == EXIT_USER_ERROR and "Traceback" not in run.err and "Error executing job" not in run.err
    assert [line for line in run.err.splitlines() if line.strip()] == [
        f"rescue {command[0]}: error: {bad}:1: participants: is a string ('Alan, Evelyn') (a list of names, e.g. [\"Alan\", \"Evelyn\"])"
    ]


def test_env_is_respected_and_refused_when_the_data_lacks_that_scenario(rescue, tmp_path, couple_seeds_jsonl):
    run = rescue(["rollout", f"hydra.run.dir={tmp_path / 'r'}", "env=family", f"data.path={couple_seeds_jsonl}", *ROLLOUT])
    assert run.rc == EXIT_USER_ERROR and "holds no family dialogues" in run.err
    fam = rescue(["rollout", f"hydra.run.dir={tmp_path / 'f'}", "env=family", *ROLLOUT])
    assert fam.rc == 0, fam.err[-2000:]
    from rescue_env.jsonl import read_objects
    from rescue_env.rollout import episodes_file

    ids = {obj["seed_sample_id"] for _, obj in read_objects(episodes_file(tmp_path / "f"))}
    assert ids and all(i.startswith("family") for i in ids)


# --- keys -----------------------------------------------------------------------------------


@pytest.mark.parametrize("override", ["llm.api_key=SENTINELVALUE123", "+llm.api_key=SENTINELVALUE123", "++llm.api_key=SENTINELVALUE123"])
def test_an_api_key_setting_is_refused_and_never_saved(rescue, tmp_path, override):
    out = tmp_path / "run"
    run = rescue(["rollout", f"hydra.run.dir={out}", *ROLLOUT, override])
    assert_refused(run, "llm.api_key is not a setting", "llm.api_key_env")
    assert "SENTINELVALUE123" not in run.err + run.out
    assert not out.exists()


def test_a_key_where_a_variable_name_belongs_is_refused(rescue, tmp_path):
    out = tmp_path / "run"
    run = rescue(["rollout", f"hydra.run.dir={out}", *ROLLOUT, "llm.api_key_env=sk-abcdefghijklmnopqrstu"])
    assert_refused(run, "llm.api_key_env", "name")
    assert "abcdefghijklmnopqrstu" not in run.err and not out.exists()


def test_a_key_in_a_config_file_is_refused(rescue, tmp_path):
    # a key planted in a YAML preset is caught on the composed config, not only on the command line
    conf = tmp_path / "conf" / "llm"
    conf.mkdir(parents=True)
    (conf / "mine.yaml").write_text("defaults:\n  - default\nmodel: sk-abcdefghijklmnopqrstuvwx\n")
    out = tmp_path / "run"
    run = rescue(["rollout", f"hydra.run.dir={out}", *ROLLOUT, f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "llm=mine"])
    assert_refused(run, "llm.model holds what looks like an API key")
    assert not out.exists()


# --- outcomes -------------------------------------------------------------------------------


def test_a_run_whose_llm_episodes_all_failed_exits_3_with_the_reason(rescue, tmp_path, couple_seeds_jsonl):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "run"
    run = rescue([
        "rollout", f"hydra.run.dir={out}", "agents=[llm]", f"llm.base_url=http://127.0.0.1:{port}/v1",
        "llm.max_retries=0", f"data.path={couple_seeds_jsonl}", "episodes=1", "progress=false",
    ])
    assert run.rc == EXIT_SOME_FAILED, run.err[-2000:]
    assert "6 of 6 episodes failed: therapist: connection refused by 127.0.0.1" in run.err
    # everything was written all the same
    assert {"episodes.jsonl.gz", "metrics.json", "summary.csv", "report.html"} <= set(os.listdir(out))


def test_the_data_command_exit_codes(run_cli, tmp_path):
    assert run_cli("data", "validate").rc == 0
    assert run_cli("data", "validate", str(tmp_path / "missing.jsonl")).rc == EXIT_USER_ERROR


# --- export ---------------------------------------------------------------------------------


@pytest.fixture
def exported(tmp_path) -> Path:
    """The bundled seeds as one JSON Lines file (an export's canonical form)."""
    from rescue_env.data import load_dialogues, write_jsonl

    path = tmp_path / "in.jsonl"

    write_jsonl(load_dialogues(), path)
    return path


def test_export_refuses_to_overwrite_its_input_unless_in_place(run_cli, exported):
    before = exported.read_bytes()
    res = run_cli("data", "export", str(exported), str(exported))
    assert res.rc == EXIT_USER_ERROR and "is the input file" in res.err and "--in-place" in res.err
    assert exported.read_bytes() == before
    res = run_cli("data", "export", str(exported), str(exported), "--in-place")
    assert res.rc == 0 and exported.read_bytes() == before  # canonical data: the same bytes again


def test_export_killed_mid_write_leaves_the_input_whole(run_cli, exported, monkeypatch):
    import json

    before = exported.read_bytes()
    calls = {"n": 0}
    real = json.dumps

    def dying(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # the kill, after two dialogues were written
        return real(*a, **k)

    monkeypatch.setattr("rescue_env.data.loader.json.dumps", dying)
    with pytest.raises(KeyboardInterrupt):
        run_cli("data", "export", str(exported), str(exported), "--in-place")
    assert exported.read_bytes() == before
    assert sorted(p.name for p in exported.parent.iterdir()) == [exported.name]


def test_export_to_a_directory_or_below_a_file_is_a_clear_error(run_cli, exported, tmp_path):
    res = run_cli("data", "export", str(exported), str(tmp_path))
    assert res.rc == EXIT_USER_ERROR and "is a directory" in res.err and "Traceback" not in res.err
    res = run_cli("data", "export", str(exported), str(exported / "x.jsonl"))
    assert res.rc == EXIT_USER_ERROR and "is not a directory" in res.err


def test_a_bug_exits_1_with_its_traceback_and_no_key(rescue, tmp_path, monkeypatch):
    secret = "SENTINEL-plain-bug-path-91ab"

    def broken(*args, **kwargs):
        raise RuntimeError(f"unexpected reply quoting key {secret}")

    monkeypatch.setattr("rescue_env.experiments.rollout.run", broken)
    out = tmp_path / "run"
    run = rescue(["rollout", f"hydra.run.dir={out}", *ROLLOUT], env={"OPENAI_API_KEY": secret})
    assert run.rc == 1 and "Traceback" in run.err and "RuntimeError: unexpected reply quoting key [redacted]" in run.err
    assert secret not in run.err + run.out
    assert all(secret.encode() not in p.read_bytes() for p in out.rglob("*") if p.is_file())


def test_a_sweep_checks_each_job(rescue, tmp_path):
    sweep = tmp_path / "sweep"
    run = rescue(["rollout", "-m", "reward.lam=0,-1", f"hydra.sweep.dir={sweep}", *ROLLOUT])
    assert run.rc == EXIT_USER_ERROR and "reward.lam=-1.0 is out of range" in run.err
    assert not sweep.exists(), "every job is checked before the first one runs"
    ok = rescue(["rollout", "-m", "reward.lam=0,0.5", f"hydra.sweep.dir={sweep}", *ROLLOUT])
    assert ok.rc == 0 and (sweep / "1" / "metrics.json").is_file()


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["reward.lam=inf"], "reward.lam=inf"),
        (["reward.lam=1e308"], "reward.lam=1e+308 is out of range"),
        (["reward.beta=inf"], "reward.beta=inf"),
        (["reward.lam=nan"], "reward.lam=nan"),
        (["compare_to=bogus"], "compare_to='bogus' is not an agent of this run; name one of never"),
        (["compare_to=heuristic"], None),  # the default reference, not in agents=[never]: no Δ, no error
    ],
)
def test_infinite_weights_and_a_reference_outside_the_run_are_refused(rescue, tmp_path, overrides, needle):
    """inf / NaN / 1e308 made σ* -inf or NaN and non-JSON metrics; a mistyped reference made
    the Δ columns vanish: both refused before the run folder exists."""
    out = tmp_path / "run"
    run = rescue(["rollout", f"hydra.run.dir={out}", *ROLLOUT, *overrides])
    if needle is None:
        assert run.rc == 0, run.err[-2000:]
        return
    assert_refused(run, needle)
    assert not out.exists()


@pytest.mark.parametrize("command", ["rollout", "calibrate"])
def test_an_unknown_pattern_label_stops_the_run_naming_file_and_line(rescue, tmp_path, command):
    """Rollout and calibrate used to drop an unknown relation-pattern label without a word
    (the episode then started from pursue_withdraw): an error at FILE:LINE, like other bad input."""
    import json

    from rescue_env.data import load_dialogues

    records = [d.to_dict() for d in load_dialogues() if d.scenario == "couple"]
    row = next(i for i, r in enumerate(records[1]["rows"]) if r.get("primary_speaker") != "Therapist")
    records[1]["rows"][row]["relation_pattern"] = "pursue-withdraw"  # a typo of pursue_withdraw
    data = tmp_path / "typo.jsonl"
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    out = tmp_path / "run"
    extra = ROLLOUT if command == "rollout" else ()
    run = rescue([command, f"hydra.run.dir={out}", f"data.path={data}", *extra])
    assert run.rc == EXIT_USER_ERROR, run.err[-2000:]
    assert f"{data}:2: rows[{row}].relation_pattern: unknown couple pattern 'pursue-withdraw'" in run.err
    assert "Traceback" not in run.err


def test_a_saved_behaviour_prior_scores_the_tasks_and_a_bad_one_is_a_user_error(rescue, tmp_path):
    """``agent.prior`` (and the rest of the agent's settings) reach eval-tasks; a prior file
    that cannot serve (missing, a folder, not a prior, fitted on the other scenario) is one
    line and exit 2, in eval-tasks as in train."""
    from rescue_env.agents.prior import BehaviourPrior
    from rescue_env.data import load_dialogues

    couples = [d for d in load_dialogues() if d.scenario == "couple"]
    saved = BehaviourPrior.fit(couples, ["couple"]).save(tmp_path / "prior.json")
    seeds = Path(__file__).resolve().parents[2] / "rescue_env" / "data" / "seeds"
    args = ["eval-tasks", "predictor=agent", "agent=imitation", "tasks=[stp]", "progress=false", f"data.path={seeds / 'couple'}"]
    ok = rescue([*args, f"agent.prior={saved}", f"hydra.run.dir={tmp_path / 'ok'}"])
    assert ok.rc == 0, ok.err[-2000:]
    (tmp_path / "other.json").write_text('{"format": "something-else"}')
    for bad, needle in [
        (tmp_path / "missing.json", "does not exist"),
        (tmp_path, "is not a readable behaviour prior file"),
        (tmp_path / "other.json", "is not a behaviour prior file"),
    ]:
        assert_refused(rescue([*args, f"agent.prior={bad}", f"hydra.run.dir={tmp_path / 'bad'}"]), needle)
    run = rescue([*args[:-1], f"data.path={seeds / 'family_therapy'}", f"agent.prior={saved}", f"hydra.run.dir={tmp_path / 'fam'}"])
    assert_refused(run, "fitted on ['couple'] dialogues only, not family")


def test_a_prior_that_cannot_serve_every_scenario_of_a_rollout_stops_it_before_any_episode(rescue, tmp_path):
    """A couple-only prior in an ``env=all`` rollout: the agents are built before the first
    episode, so the run stops with one line and exit 2 and no episode is played (it used to
    play every couple episode and fail at the first family one)."""
    from rescue_env.agents.prior import BehaviourPrior
    from rescue_env.data import load_dialogues
    from rescue_env.rollout import episodes_file

    couples = [d for d in load_dialogues() if d.scenario == "couple"]
    saved = BehaviourPrior.fit(couples, ["couple"]).save(tmp_path / "prior.json")
    out = tmp_path / "run"
    run = rescue(["rollout", f"hydra.run.dir={out}", "episodes=1", "agents=[heuristic,imitation]", "progress=false", "report=false", f"agent.prior={saved}"])
    assert_refused(run, "fitted on ['couple'] dialogues only, not family")
    path = episodes_file(out)
    assert not path.exists() or path.stat().st_size == 0
