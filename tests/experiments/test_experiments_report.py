"""``rescue report RUN_DIR``: the report and plots come back from ``episodes.jsonl``, a judge
section survives, another reference agent can be chosen, and bad folders fail clearly."""

from __future__ import annotations

import shutil
from pathlib import Path

from experiments.cli import main


def test_report_is_rebuilt_from_the_run_folder(rollout_run, tmp_path: Path, capsys):
    run = tmp_path / "run"
    shutil.copytree(rollout_run.dir, run)
    html = (run / "report.html").read_text(encoding="utf-8")
    judged = html.replace("<!-- judge -->", '<!-- judge -->\n<!-- judge:begin --><section id="judge">JUDGED</section><!-- judge:end -->')
    (run / "report.html").write_text(judged, encoding="utf-8")
    shutil.rmtree(run / "plots")
    assert main(["report", str(run), "--compare-to", "never"]) == 0
    assert "report:" in capsys.readouterr().out
    new = (run / "report.html").read_text(encoding="utf-8")
    assert "JUDGED" in new and new.count("judge:begin") == 1
    assert "Δ vs never" in new and "Δ vs heuristic" not in new
    assert (run / "plots" / "comparison.png").is_file() and (run / "plots" / "episode_heuristic.png").is_file()


def test_a_folder_without_episodes_is_a_clear_error(tmp_path: Path, capsys):
    assert main(["report", str(tmp_path)]) == 1
    assert "not a `rescue rollout` run folder" in capsys.readouterr().err
