"""`rescue judge` (the Hydra app) on a small generated rollout folder."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from judge_fakes import FakeJudgeClient, write_rollout

import rescue_env.experiments.judge as app
from rescue_env.judges.agreement import read_scores

CONF = str(Path(app.__file__).resolve().parents[1] / "conf")


def _cfg(overrides: list[str]):
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose(config_name="judge", overrides=overrides)


def _check_outputs(run: Path, scorer: str) -> dict:
    for name in ("judgements.jsonl", "judge_summary.json", "judge_scores.csv", "closed_loop.jsonl",
                 "plots/judge_hist.png", "plots/judge_heatmap.png"):
        assert (run / name).is_file() and (run / name).stat().st_size > 0, name
    assert (run / "plots/judge_hist.png").read_bytes()[:4] == b"\x89PNG"
    summary = json.loads((run / "judge_summary.json").read_text())
    assert summary["scorer"] == scorer
    records = [json.loads(line) for line in (run / "judgements.jsonl").read_text().splitlines()]
    assert records and all(r["scorer"] == scorer for r in records)
    html = (run / "report.html").read_text()
    assert html.count("<!-- judge:begin -->") == 1 and html.count('<section id="judge">') == 1
    assert html.index("<!-- judge -->") < html.index('<section id="judge">') < html.index("footer")
    assert "data:image/png;base64," in html
    return summary


def test_offline_app_writes_every_output(tmp_path: Path) -> None:
    run = write_rollout(tmp_path / "run", n_seeds=1)
    cfg = _cfg([f"run_dir={run}", "modes=[absolute,pairwise,twins]", "progress=false"])
    app.run(cfg)
    summary = _check_outputs(run, "offline-heuristic")
    assert "NOT an LLM judgement" in summary["scorer_note"]
    assert "offline heuristic" in (run / "report.html").read_text()
    ab = summary["absolute"]
    assert ab["veto_count"] == 1 and ab["per_agent"]["poor"]["veto_count"] == 1
    assert isinstance(ab["length_bias_warning"], bool) and ab["length_score_correlation"]["n"] == ab["n_items"]
    assert ab["per_agent"]["heuristic"]["overall_mean"] > ab["per_agent"]["poor"]["overall_mean"]
    assert summary["pairwise"]["wins"]["heuristic vs poor"]["heuristic"] == summary["pairwise"]["n_pairs"] == 2
    assert set(summary["closed_loop"]["per_agent"]) == {"heuristic", "poor", "never"}
    # judge scores come out in the agreement CSV shape
    ratings = read_scores(run / "judge_scores.csv", integer=False)
    assert {r.rater for r in ratings} == {"judge"} and len(ratings) == 5 * ab["n_items"]
    # a second run replaces the report section instead of adding one
    app.run(_cfg([f"run_dir={run}", "progress=false"]))
    _check_outputs(run, "offline-heuristic")

    # agreement against the run's own judgements (humans who agree with the judge exactly)
    human = tmp_path / "human.csv"
    lines = (run / "judge_scores.csv").read_text().splitlines()
    body = [ln.replace(",judge,", f",{rater},") for ln in lines[1:] for rater in ("h1", "h2")]
    human.write_text("\n".join([lines[0], *body]) + "\n")
    from rescue_env.experiments.cli import main as rescue

    assert rescue(["judge", "agreement", "--human", str(human), "--run", str(run)]) == 0
    agreement = json.loads((run / "agreement.json").read_text())
    assert agreement["empathy"]["exact"] == 1.0 and agreement["empathy"]["kappa_quadratic"] == pytest.approx(1.0)
    assert agreement["adjudication"] == []


def test_llm_app_with_a_fake_client(tmp_path: Path) -> None:
    run = write_rollout(tmp_path / "run", n_seeds=1)
    cfg = _cfg([f"run_dir={run}", "scorer=llm", "modes=[absolute,pairwise,twins]", "progress=false",
                "batch_size=8", "llm.model=fake-judge", "temperature=0.0", "twins.items_per_agent=2"])
    client = FakeJudgeClient()
    app.run(cfg, client=client)
    summary = _check_outputs(run, "llm")
    assert summary["judge_model"] == "fake-judge" and summary["temperature"] == 0.0
    assert summary["absolute"]["anchors"]["n_flagged"] == 0
    assert summary["pairwise"]["position_bias"]["applicable"] is True


def test_data_path_without_run_dir_writes_to_out_dir(tmp_path: Path) -> None:
    cfg = _cfg(["progress=false", "max_items_per_agent=5"])
    app.run(cfg, out_dir=tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "judge_summary.json").read_text())
    assert summary["agents"] == ["reference"] and summary["n_items"] == 5
    assert not (tmp_path / "out" / "report.html").exists()


def test_bad_options_fail_clearly(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="scorer"):
        app.judge_config(_cfg(["scorer=gpt"]))
    from rescue_env.experiments.errors import UserError

    with pytest.raises(UserError, match="episodes.jsonl.gz not found"):
        app.run(_cfg([f"run_dir={tmp_path}", "progress=false"]))


def test_the_gzip_and_the_plain_episodes_file_are_judged_alike(tmp_path: Path) -> None:
    from rescue_env.jsonl import read_bytes

    runs = [write_rollout(tmp_path / name, n_seeds=1, compress=name == "gz") for name in ("gz", "plain")]
    assert [p.name for p in sorted(runs[0].iterdir())] == ["episodes.jsonl.gz", "report.html"]
    assert [p.name for p in sorted(runs[1].iterdir())] == ["episodes.jsonl", "report.html"]
    for run in runs:
        app.run(_cfg([f"run_dir={run}", "progress=false"]))
    summaries = [json.loads((run / "judge_summary.json").read_text()) for run in runs]
    assert summaries[0]["absolute"] == summaries[1]["absolute"] and summaries[0]["absolute"]["n_items"] > 0
    assert read_bytes(runs[0] / "judgements.jsonl") == read_bytes(runs[1] / "judgements.jsonl")


def test_cli_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real Hydra entry point: overrides on argv, outputs (and Hydra's files) in the run folder."""
    run = write_rollout(tmp_path / "run", n_seeds=1, episodes=1)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["rescue-judge", f"run_dir={run}", "progress=false",
                                      "hydra/job_logging=disabled", "hydra/hydra_logging=disabled"])
    assert app.main() == 0
    assert (run / ".hydra-judge" / "config.yaml").is_file() and not (tmp_path / "outputs").exists()
    assert not (run / ".hydra").exists()  # the rollout's own Hydra folder is left alone
    _check_outputs(run, "offline-heuristic")
