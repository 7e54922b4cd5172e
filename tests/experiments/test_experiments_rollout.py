"""``rescue rollout``: every output file of a tiny run, the printed table, resume (rerun,
lost line, torn line or gzip member, an older folder's plain file), the episodes file's
forms (gzip by default, ``compress=false``, both refused), the console script, a trained
policy, and the real subset."""

from __future__ import annotations

import base64
import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rescue_env.data import load_dialogues
from rescue_env.jsonl import decode, encode_lines, read_objects, read_text, split_lines
from rescue_env.rollout import EPISODES_GZ, EPISODES_PLAIN, episodes_file

AGENTS = ["never", "heuristic"]
N_SEEDS = 9  # bundled seed dialogues: 6 couples, 3 families
PNG = b"\x89PNG\r\n\x1a\n"
SUMMARY_KEYS = {
    "episodes", "failed", "sigma_return_mean", "sigma_return_ci95",
    "sigma_mean_distress", "sigma_stance", "sigma_max_distress", "sigma_intervention_cost",
    "final_max_distress", "peak_max_distress", "untended_turns_mean", "untended_turns_max_member",
    "intervention_rate", "pattern_shares",
}


def lines_of(path: Path) -> list[dict]:
    return [obj for _, obj in read_objects(path)]


def text_lines(path: Path) -> list[str]:
    """The file's lines (gzip taken off), each with no "\\n"."""
    return split_lines(read_text(path))


def write_lines(path: Path, lines: list[str]) -> None:
    """Write ``lines`` in the form of the file at ``path`` (gzip for a ``.gz`` name)."""
    path.write_bytes(encode_lines(lines, compress=path.name.endswith(".gz")))


def keys_of(path: Path) -> list[str]:
    return [f"rollout/{o['agent']}/{o['seed_sample_id']}/ep{o['episode']}" for o in lines_of(path)]


# --- the output files -----------------------------------------------------------------------


def test_episodes_jsonl_reads_back_in_the_benchmark_schema(rollout_run):
    path = episodes_file(rollout_run.dir)
    assert path.name == EPISODES_GZ and not (rollout_run.dir / EPISODES_PLAIN).exists()
    objs = lines_of(path)
    assert len(objs) == len(AGENTS) * 1 * N_SEEDS
    for agent in AGENTS:
        assert sum(o["agent"] == agent for o in objs) == 1 * N_SEEDS
    assert len(set(keys_of(path))) == len(objs), "one line per episode"
    dialogues = load_dialogues(path)
    assert len(dialogues) == len(objs)
    seeds = {d.sample_id: d for d in load_dialogues()}
    for obj, d in zip(objs, dialogues):
        assert obj["seed_sample_id"] in seeds
        seed = seeds[obj["seed_sample_id"]]
        assert d.scenario == seed.scenario and d.participants == seed.participants
        assert isinstance(obj["sigma_return"], float) and math.isfinite(obj["sigma_return"])
        assert obj["episode_stats"]["sigma_return"] == obj["sigma_return"]
        assert obj["failed"] is False and len(obj["trace"]) >= 2
        # seed rows, then simulated rows; every row carries the group state
        sim = [r for r in obj["rows"] if r.get("simulated")]
        assert sim and len(sim) < len(obj["rows"])
        for row in obj["rows"]:
            st = row["state"]
            assert st["members"] == seed.participants
            assert len(st["distress"]) == len(seed.participants) and all(0 <= x <= 1 for x in st["distress"])
        assert all(row.extras.get("state") for row in d.rows)
        # never speaks: no simulated therapist row
        if obj["agent"] == "never":
            assert not any(r["primary_speaker"] == "Therapist" for r in sim)


def test_metrics_json_per_agent(rollout_run):
    m = json.loads((rollout_run.dir / "metrics.json").read_text())
    assert m["episodes_per_seed"] == 1 and m["seed"] == 0
    assert list(m["agents"]) == AGENTS
    for agent, s in m["agents"].items():
        assert SUMMARY_KEYS <= set(s), SUMMARY_KEYS - set(s)
        assert s["episodes"] == N_SEEDS and s["failed"] == 0
        assert s["sigma_return_ci95"] > 0
        assert 0 <= s["final_max_distress"] <= s["peak_max_distress"] <= 1
        assert 0 <= s["intervention_rate"] <= 1
        assert sum(s["pattern_shares"].values()) == pytest.approx(1.0)
        parts = s["sigma_mean_distress"] + s["sigma_stance"] + s["sigma_max_distress"] + s["sigma_intervention_cost"]
        # the components are undiscounted sums; the return is discounted (γ = 0.99, ≤ 30 steps)
        assert parts == pytest.approx(s["sigma_return_mean"], rel=0.3)
    never, heur = m["agents"]["never"], m["agents"]["heuristic"]
    assert never["intervention_rate"] == 0 and never["sigma_intervention_cost"] == 0
    assert heur["intervention_rate"] > 0 and heur["sigma_intervention_cost"] < 0
    # the heuristic helps on the same episodes (common random numbers)
    assert heur["sigma_return_mean"] > never["sigma_return_mean"]
    assert never["untended_turns_max_member"] >= heur["untended_turns_max_member"]


def test_summary_csv_one_row_per_agent_and_scope(rollout_run):
    with (rollout_run.dir / "summary.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    m = json.loads((rollout_run.dir / "metrics.json").read_text())
    assert [(r["agent"], r["scenario"]) for r in rows] == [(a, s) for a in AGENTS for s in ("all", "couple", "family")]
    for r in rows:
        fig = m["agents"][r["agent"]]
        if r["scenario"] != "all":
            fig = fig["by_scenario"][r["scenario"]]
        assert float(r["σ* return"]) == pytest.approx(fig["sigma_return_mean"], abs=1e-3)
        assert float(r["speak rate"]) == pytest.approx(fig["intervention_rate"], abs=1e-3)
    never = next(r for r in rows if r["agent"] == "never" and r["scenario"] == "all")
    paired = m["agents"]["never"]["paired"]
    assert float(never["Δ vs heuristic"]) == pytest.approx(paired["mean"], abs=1e-3)
    assert float(never["Δ 95 % CI low"]) == pytest.approx(paired["ci_low"], abs=1e-3)


def test_metrics_compare_every_agent_on_the_same_episodes(rollout_run):
    m = json.loads((rollout_run.dir / "metrics.json").read_text())
    assert m["compare_to"] == "heuristic" and m["scenarios"] == ["couple", "family"] == m["pooled_scenarios"]
    never = m["agents"]["never"]
    assert "paired" not in m["agents"]["heuristic"]
    assert never["paired"]["n"] == N_SEEDS and never["paired"]["mean"] < 0
    assert never["paired"]["ci_low"] <= never["paired"]["mean"] <= never["paired"]["ci_high"]
    assert {s: f["episodes"] for s, f in never["by_scenario"].items()} == {"couple": 6, "family": 3}
    # the pairs are episode by episode: Δ is the mean of the per-episode differences
    objs = lines_of(episodes_file(rollout_run.dir))
    ret = {(o["agent"], o["seed_sample_id"], o["episode"]): o["sigma_return"] for o in objs}
    diffs = [ret["never", s, e] - ret["heuristic", s, e] for (a, s, e) in ret if a == "never"]
    assert never["paired"]["mean"] == pytest.approx(sum(diffs) / len(diffs))


def test_console_summary_fits_100_columns(rollout_run):
    table = rollout_run.out[: rollout_run.out.index("report:")]
    lines = [line for line in table.splitlines() if line.strip()]
    assert max(len(line) for line in lines) <= 100, table
    assert re.search(r"^never\s+9\s+-\d+\.\d\d ± \d+\.\d\d\s+-\d+\.\d\d \[", table, re.M), table
    assert re.search(r"^↳ family\s+3\s", table, re.M), table


def test_plots(rollout_run):
    plots = rollout_run.dir / "plots"
    expected = {"comparison.png"} | {f"episode_{a}.png" for a in AGENTS} | {f"stance_{a}.png" for a in AGENTS}
    assert expected <= {p.name for p in plots.iterdir()}
    for name in expected:
        data = (plots / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 5000, name


def test_report_html_is_self_contained(rollout_run):
    html = (rollout_run.dir / "report.html").read_text(encoding="utf-8")
    assert html.lstrip().lower().startswith("<!doctype html>") and html.rstrip().endswith("</html>")
    assert 'src="http' not in html and "src='http" not in html
    assert not re.search(r"<(script|link)[^>]+(src|href)=", html, re.I), "no external script or stylesheet"
    srcs = re.findall(r'<img src="([^"]+)"', html)
    assert len(srcs) == 1 + 2 * len(AGENTS)  # comparison + per agent: episode, stance graph
    for src in srcs:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).startswith(PNG)
    assert html.count('<table class="tr">') == len(AGENTS), "one annotated transcript per agent"
    for agent in AGENTS:
        assert f"<h2>Agent: {agent}</h2>" in html
    # the transcripts show therapist moves (the heuristic speaks) and states
    assert '<tr class="th">' in html and "<i>(seed)</i>" in html


def test_report_has_contents_metadata_glossary_and_one_example_episode_for_all(rollout_run):
    html = (rollout_run.dir / "report.html").read_text(encoding="utf-8")
    toc = html[html.index('<nav class="toc">') : html.index("</nav>")]
    for target in re.findall(r'href="#([^"]+)"', toc):
        assert target == "judge" or f'id="{target}"' in html, target
    assert '<a href="#summary">' in toc and '<a href="#glossary">' in toc and '<a href="#agent-heuristic">' in toc
    assert "rescue-env version" in html and "git commit" in html and "<h2>Configuration</h2>" in html
    assert "untended (most)</dt>" in html and "Δ vs heuristic" in html
    # every agent's example is the same seed dialogue and episode
    examples = re.findall(r"Example episode[^<]*<code>rollout/([^/]+)/([^<]+)</code>", html)
    assert [a for a, _ in examples] == AGENTS and len({rest for _, rest in examples}) == 1, examples


def test_printed_table_names_each_agent(rollout_run):
    lines = rollout_run.out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("agent") and "σ* return" in line)
    rule = next(i for i in range(header, len(lines)) if lines[i].startswith("---"))
    names = [line.split()[0] for line in lines[rule + 1 : rule + 1 + 3 * len(AGENTS)] if not line.startswith("↳")]
    assert names == AGENTS
    assert "report:" in rollout_run.out and "run folder:" in rollout_run.out


def test_hydra_files_in_the_run_folder(rollout_run):
    hydra_dir = rollout_run.dir / ".hydra"
    assert {"config.yaml", "hydra.yaml", "overrides.yaml"} <= {p.name for p in hydra_dir.iterdir()}
    assert "episodes: 1" in (hydra_dir / "config.yaml").read_text()


# --- resume ---------------------------------------------------------------------------------


@pytest.fixture
def copy_of_run(rollout_run, tmp_path) -> Path:
    d = tmp_path / "run"
    shutil.copytree(rollout_run.dir, d)
    return d


def test_rerun_in_the_same_folder_does_not_duplicate(copy_of_run, rescue, rollout_args):
    path = episodes_file(copy_of_run)
    before = sorted(text_lines(path))
    metrics = json.loads((copy_of_run / "metrics.json").read_text())
    run = rescue(["rollout", f"hydra.run.dir={copy_of_run}", *rollout_args])
    assert run.rc == 0, run.err[-2000:]
    assert sorted(text_lines(path)) == before, "same episodes, none added"
    again = json.loads((copy_of_run / "metrics.json").read_text())
    assert again["agents"] == metrics["agents"]


def test_a_lost_last_line_is_redone_identically(copy_of_run, rescue, rollout_args):
    path = episodes_file(copy_of_run)
    keys = keys_of(path)
    lost = dict(zip(keys, lines_of(path)))[keys[-1]]
    write_lines(path, text_lines(path)[:-1])
    run = rescue(["rollout", f"hydra.run.dir={copy_of_run}", *rollout_args])
    assert run.rc == 0, run.err[-2000:]
    assert sorted(keys_of(path)) == sorted(keys), "exactly the same episodes, once each"
    redone = dict(zip(keys_of(path), lines_of(path)))[keys[-1]]
    # episodes are seeded per (seed dialogue, episode): the redone one is the same episode
    assert redone["sigma_return"] == lost["sigma_return"]
    assert redone["trace"] == lost["trace"]


def as_older_plain_folder(run_dir: Path) -> Path:
    """Turn the run folder's gzip episodes file into the plain ``episodes.jsonl`` of a folder
    made by an older version; returns its path."""
    gz = run_dir / EPISODES_GZ
    plain = run_dir / EPISODES_PLAIN
    plain.write_bytes(decode(gz.read_bytes()).data)
    gz.unlink()
    return plain


def tear_the_last_episode(path: Path) -> None:
    """Cut the file in the middle of its last episode, as a killed write would."""
    raw = path.read_bytes()
    decoded = decode(raw)
    if decoded.gzip:
        last = decoded.members[-2][0]  # the last member starts where the one before ends
    else:
        last = raw.rstrip(b"\n").rfind(b"\n") + 1
    path.write_bytes(raw[: last + (len(raw) - last) // 2])


@pytest.mark.parametrize("form", ["gzip", "plain"])
def test_a_torn_last_line_is_ignored_and_redone(copy_of_run, rescue, rollout_args, form):
    path = episodes_file(copy_of_run) if form == "gzip" else as_older_plain_folder(copy_of_run)
    keys = keys_of(path)
    before = sorted(text_lines(path))
    tear_the_last_episode(path)
    run = rescue(["rollout", f"hydra.run.dir={copy_of_run}", *rollout_args])
    assert run.rc == 0, run.err[-2000:]
    # the metrics count every episode once, and only the torn episode was played again...
    m = json.loads((copy_of_run / "metrics.json").read_text())
    assert all(s["episodes"] == N_SEEDS for s in m["agents"].values())
    assert f"kept the {len(keys) - 1} episodes before it" in run.err + run.out
    # ...and the file is whole again, in its own form: every line parses, same episodes, loads back
    assert episodes_file(copy_of_run) == path and not (copy_of_run / (EPISODES_PLAIN if form == "gzip" else EPISODES_GZ)).exists()
    (backup,) = copy_of_run.glob(f"{path.name}.cut-*")  # the torn bytes, kept beside it
    assert sorted(keys_of(path)) == sorted(keys) and sorted(text_lines(path)) == before
    assert len(load_dialogues(path)) == len(keys)
    assert read_text(path).endswith("\n")
    # and a second rerun finds everything done
    assert rescue(["rollout", f"hydra.run.dir={copy_of_run}", *rollout_args]).rc == 0
    assert sorted(text_lines(path)) == before


# --- the episodes file's forms -----------------------------------------------------------------


def test_the_episodes_file_is_gzip_and_several_times_smaller_than_the_plain_lines(rollout_run):
    path = episodes_file(rollout_run.dir)
    raw = path.read_bytes()
    plain = decode(raw).data
    assert raw[:2] == b"\x1f\x8b" and len(plain) >= 4 * len(raw), (len(plain), len(raw))


def test_compress_false_writes_the_same_episodes_as_plain_lines(rollout_run, rescue, tmp_path):
    out = tmp_path / "plain"
    run = rescue(["rollout", f"hydra.run.dir={out}", "episodes=1", "agents=[never]", "env=family", "compress=false",
                  "progress=false", "report=false"])
    assert run.rc == 0, run.err[-2000:]
    assert episodes_file(out) == out / EPISODES_PLAIN and not (out / EPISODES_GZ).exists()
    assert not (out / EPISODES_PLAIN).read_bytes().startswith(b"\x1f\x8b")
    shared = [line for line in text_lines(episodes_file(rollout_run.dir))
              if json.loads(line)["agent"] == "never" and json.loads(line)["scenario"] == "family"]
    assert text_lines(out / EPISODES_PLAIN) == shared


def test_an_older_plain_folder_is_continued_plainly(copy_of_run, rescue, rollout_args):
    plain = as_older_plain_folder(copy_of_run)
    keys = keys_of(plain)
    write_lines(plain, text_lines(plain)[:-2])
    run = rescue(["rollout", f"hydra.run.dir={copy_of_run}", *rollout_args])
    assert run.rc == 0, run.err[-2000:]
    assert not (copy_of_run / EPISODES_GZ).exists() and sorted(keys_of(plain)) == sorted(keys)


def test_a_folder_holding_both_files_is_refused(copy_of_run, rescue, rollout_args, tmp_path):
    gz = episodes_file(copy_of_run)
    (copy_of_run / EPISODES_PLAIN).write_bytes(decode(gz.read_bytes()).data)
    before = {p.name: p.read_bytes() for p in copy_of_run.iterdir() if p.is_file()}
    for argv in (
        ["rollout", f"hydra.run.dir={copy_of_run}", *rollout_args],
        ["report", str(copy_of_run)],
        ["merge", str(tmp_path / "merged"), str(copy_of_run)],
        ["judge", f"run_dir={copy_of_run}", "progress=false"],
    ):
        run = rescue(argv)
        assert run.rc == 2, (argv, run.err[-2000:])
        err = run.err + run.out
        assert "Traceback" not in err and f"holds both {EPISODES_GZ} and {EPISODES_PLAIN}" in err and "move the other out" in err
    assert {p.name: p.read_bytes() for p in copy_of_run.iterdir() if p.is_file()} == before
    assert not (tmp_path / "merged").exists()


# --- the console script ---------------------------------------------------------------------


def test_console_script_rescue_rollout(tmp_path, sentinel):
    exe = Path(sys.executable).with_name("rescue")
    if not exe.exists():
        pytest.skip(f"console script not installed beside {sys.executable}")
    out = tmp_path / "cli"
    env = {**os.environ, "OPENAI_API_KEY": sentinel, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [str(exe), "rollout", f"hydra.run.dir={out}", "episodes=1", "agents=[never]", "progress=false"],
        capture_output=True, text=True, env=env, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"^never\s+9\s", proc.stdout, re.M), proc.stdout
    for name in (EPISODES_GZ, "metrics.json", "summary.csv", "report.html", "plots/comparison.png", "plots/episode_never.png"):
        assert (out / name).is_file(), name
    assert len(text_lines(out / EPISODES_GZ)) == N_SEEDS
    assert sentinel not in proc.stdout + proc.stderr


# --- a trained policy and other data --------------------------------------------------------


def test_rollout_with_a_trained_policy_adds_it(train_run, couple_seeds_jsonl, rescue, tmp_path):
    out = tmp_path / "trained"
    model = train_run.dir / "model.zip"
    run = rescue(["rollout", f"hydra.run.dir={out}", "episodes=1", "agents=[never]", f"policy={model}", f"data.path={couple_seeds_jsonl}", "progress=false"])
    assert run.rc == 0, run.err[-2000:]
    m = json.loads((out / "metrics.json").read_text())
    assert list(m["agents"]) == ["never", "policy"]
    assert m["agents"]["policy"]["episodes"] == 6 and m["agents"]["policy"]["failed"] == 0
    objs = lines_of(episodes_file(out))
    assert sum(o["agent"] == "policy" for o in objs) == 6
    assert re.search(r"^policy\s", run.out, re.M)
    assert (out / "plots" / "episode_policy.png").is_file()


def test_a_learned_agent_named_in_agents_plays_the_policy_given(train_run, couple_seeds_jsonl, rescue, tmp_path):
    """``agents=[heuristic,maskable_ppo] policy=P`` plays P as maskable_ppo (no second
    "policy" agent); named without a file it stops before any episode with one line, exit 2."""
    out = tmp_path / "named"
    model = train_run.dir / "model.zip"
    run = rescue(["rollout", f"hydra.run.dir={out}", "episodes=1", "agents=[never,maskable_ppo]", f"policy={model}", f"data.path={couple_seeds_jsonl}", "progress=false", "report=false"])
    assert run.rc == 0, run.err[-2000:]
    m = json.loads((out / "metrics.json").read_text())
    assert list(m["agents"]) == ["never", "maskable_ppo"] and m["agents"]["maskable_ppo"]["failed"] == 0
    run = rescue(["rollout", f"hydra.run.dir={tmp_path / 'none'}", "episodes=1", "agents=[never,maskable_ppo]", f"data.path={couple_seeds_jsonl}", "progress=false"])
    assert run.rc == 2 and "Traceback" not in run.err and "needs a trained policy file" in run.err
    assert not any((tmp_path / "none").glob("episodes.jsonl*"))


def test_a_policy_of_another_observation_layout_is_a_user_error(couple_seeds_jsonl, rescue, tmp_path):
    """A couple policy saved with the observation of an older layout (19 numbers, before the
    turn was observed) stops the run with one line naming the fix."""
    import gymnasium as gym
    import numpy as np
    from sb3_contrib import MaskablePPO

    class OldLayout(gym.Env):
        observation_space = gym.spaces.Box(0.0, 1.0, (19,), np.float32)
        action_space = gym.spaces.Discrete(31)

        def reset(self, *, seed=None, options=None):
            return np.zeros(19, np.float32), {}

        def step(self, action):
            return np.zeros(19, np.float32), 0.0, True, False, {}

    MaskablePPO("MlpPolicy", OldLayout(), device="cpu").save(tmp_path / "old.zip")
    run = rescue(["rollout", f"hydra.run.dir={tmp_path / 'old'}", "episodes=1", "agents=[never]", f"policy={tmp_path / 'old.zip'}", f"data.path={couple_seeds_jsonl}", "progress=false"])
    assert run.rc == 2 and "Traceback" not in run.err and "another observation layout; retrain it" in run.err, run.err[-1500:]


def test_readme_rollout_with_a_trained_policy_on_the_default_seeds(train_run, rescue, tmp_path):
    out = tmp_path / "trained_default"
    run = rescue(["rollout", f"hydra.run.dir={out}", "episodes=1", "agents=[never]", f"policy={train_run.dir / 'model.zip'}", "progress=false"])
    # the README's form: default seeds hold couples and families; a policy trained on couples
    # runs on the couple seeds only (it has 31 actions, a family env 177)
    assert run.rc == 0, run.err[-1500:]
    m = json.loads((out / "metrics.json").read_text())
    assert list(m["agents"]) == ["never", "policy"]
    # the pooled figures compare like with like: the family seeds leave them for everyone...
    assert m["pooled_scenarios"] == ["couple"] and m["left_out"] == {"family": ["policy"]}
    assert m["agents"]["never"]["episodes"] == 6
    assert m["agents"]["policy"]["episodes"] == 6 and m["agents"]["policy"]["failed"] == 0
    # ...and the per-scenario breakdown keeps them
    assert m["agents"]["never"]["by_scenario"]["family"]["episodes"] == N_SEEDS - 6
    assert list(m["agents"]["policy"]["by_scenario"]) == ["couple"]
    assert "family is left out of the pooled rows: policy did not play it" in run.out
    trained = [o for o in lines_of(episodes_file(out)) if o["agent"] == "policy"]
    assert len(trained) == 6 and {o["scenario"] for o in trained} == {"couple"}


def test_rollout_on_the_real_subset(real_subset_path, rescue, tmp_path):
    out = tmp_path / "real"
    run = rescue(["rollout", f"hydra.run.dir={out}", "episodes=1", "agents=[heuristic]", f"data.path={real_subset_path}", "progress=false"])
    assert run.rc == 0, run.err[-2000:]
    real = load_dialogues(real_subset_path)
    m = json.loads((out / "metrics.json").read_text())
    assert m["source"] == str(real_subset_path)
    assert list(m["agents"]) == ["heuristic"] and m["agents"]["heuristic"]["episodes"] == len(real)
    objs = lines_of(episodes_file(out))
    assert {o["seed_sample_id"] for o in objs} == {d.sample_id for d in real}
    assert len(load_dialogues(episodes_file(out))) == len(real)  # data.path reads a run's gzip file


def test_env_selects_the_scenario(rescue, tmp_path):
    out = tmp_path / "family"
    run = rescue(["rollout", f"hydra.run.dir={out}", "env=family", "episodes=1", "agents=[never,heuristic]", "progress=false", "report=false"])
    assert run.rc == 0, run.err[-2000:]
    assert {o["scenario"] for o in lines_of(episodes_file(out))} == {"family"}
    m = json.loads((out / "metrics.json").read_text())
    assert m["scenarios"] == ["family"] and m["agents"]["never"]["episodes"] == N_SEEDS - 6
    assert not re.search(r"^↳", run.out, re.M), "one scenario: no per-scenario rows"


def test_env_naming_a_scenario_absent_from_the_data_is_an_error(rescue, couple_seeds_jsonl, tmp_path):
    run = rescue(["rollout", f"hydra.run.dir={tmp_path / 'x'}", "env=family", f"data.path={couple_seeds_jsonl}", "episodes=1", "agents=[never]", "progress=false"])
    assert run.rc != 0 and "no family dialogue" in run.err


# --- the second real slice: no group is cut ---------------------------------------------------


def test_rollout_refuses_the_three_partner_couple_by_name(real_more_path, rescue, tmp_path):
    """What used to drop Josh without a word: the run stops before any episode, naming the
    sample, its size and the setting to change."""
    out = tmp_path / "more"
    run = rescue(["rollout", f"hydra.run.dir={out}", "episodes=1", "agents=[heuristic]", f"data.path={real_more_path}", "progress=false"])
    assert run.rc == 2  # a user error: one clear line, no traceback
    err = run.err + run.out
    assert "Traceback" not in err and "aryn_josh_and_lorena/009_s04e09_ct34_segment04' has 3 members (Lorena, Aryn, Josh)" in err
    assert "env.max_members=3" in err
    assert not any(out.glob("episodes.jsonl*"))


def test_env_couple_does_not_check_the_families_it_does_not_play(real_more_path, real_extra_path, rescue, tmp_path):
    """``env=couple env.max_members=3`` on slices holding larger families plays the couples
    (the families' sizes are no reason to stop)."""
    out = tmp_path / "couples"
    run = rescue(["rollout", f"hydra.run.dir={out}", "env=couple", "env.max_members=3", "episodes=1", "agents=[never]", f"data.path=[{real_more_path},{real_extra_path}]", "progress=false", "report=false"])
    assert run.rc == 0, run.err[-2000:]
    assert {o["scenario"] for o in lines_of(episodes_file(out))} == {"couple"}


def test_rollout_on_several_paths_plays_every_member(real_more_path, real_subset_path, rescue, tmp_path):
    """``data.path=[A,B]``: the second slice's two-partner couples with the subset's family;
    every episode plays the seed's whole group."""
    from rescue_env.data import write_jsonl

    pairs = write_jsonl([d for d in load_dialogues(real_more_path) if len(d.participants) == 2], tmp_path / "pairs.jsonl")
    family = write_jsonl([d for d in load_dialogues(real_subset_path) if d.scenario == "family"], tmp_path / "family.jsonl")
    out = tmp_path / "run"
    run = rescue(["rollout", f"hydra.run.dir={out}", "episodes=1", "agents=[heuristic]", f"data.path=[{pairs},{family}]",
                  "progress=false", "report=false"])
    assert run.rc == 0, run.err[-2000:]
    seeds = {d.sample_id: d for d in load_dialogues([pairs, family])}
    assert len(seeds) == 5
    assert json.loads((out / "metrics.json").read_text())["source"] == f"{pairs}, {family}"
    objs = lines_of(episodes_file(out))
    assert sorted(o["seed_sample_id"] for o in objs) == sorted(seeds)
    for o in objs:
        assert o["participants"] == seeds[o["seed_sample_id"]].participants, o["seed_sample_id"]
        simulated = [r for r in o["rows"] if "state" in r]
        assert simulated and all(r["state"]["members"] == o["participants"] for r in simulated)
