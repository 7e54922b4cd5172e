"""``rescue report RUN_DIR``: the report and plots come back from ``episodes.jsonl``, a judge
section survives, another reference agent can be chosen, and bad folders fail clearly."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

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


def test_a_train_folder_says_which_rollout_to_run(train_run, capsys):
    assert main(["report", str(train_run.dir)]) != 0
    err = capsys.readouterr().err
    assert "`rescue train` run folder" in err and f"rescue rollout policy={train_run.dir / 'model.zip'}" in err


def test_shards_merge_into_the_unsharded_run(rollout_run, rescue, rollout_args, tmp_path: Path, capsys):
    import json

    shards = []
    for i in (0, 1):
        d = tmp_path / f"shard{i}"
        run = rescue(["rollout", f"hydra.run.dir={d}", *rollout_args, f"shard={i}/2", "report=false"])
        assert run.rc == 0, run.err[-2000:]
        shards.append(d)
    sizes = [len((d / "episodes.jsonl").read_text().splitlines()) for d in shards]
    assert sizes == [10, 8]  # 9 seeds over 2 shards (5 + 4), 2 agents each
    out = tmp_path / "merged"
    assert main(["merge", str(out), *map(str, shards)]) == 0
    assert "merged 2 shard(s)" in capsys.readouterr().out
    merged = json.loads((out / "metrics.json").read_text())
    whole = json.loads((rollout_run.dir / "metrics.json").read_text())
    for agent in ("never", "heuristic"):
        assert merged["agents"][agent]["episodes"] == whole["agents"][agent]["episodes"] == 9
        assert merged["agents"][agent]["sigma_return_mean"] == pytest.approx(whole["agents"][agent]["sigma_return_mean"])
    for key in ("mean", "ci_low", "ci_high", "n"):
        assert merged["agents"]["never"]["paired"][key] == pytest.approx(whole["agents"]["never"]["paired"][key])
    assert (out / "report.html").is_file() and (out / "summary.csv").is_file()


def test_a_bad_shard_is_a_clear_error(rescue, tmp_path: Path):
    run = rescue(["rollout", f"hydra.run.dir={tmp_path / 'x'}", "episodes=1", "agents=[never]", "shard=2/2", "progress=false"])
    assert run.rc != 0 and "need 0 ≤ i < n" in run.err


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs a headless chromium to lay the page out")
def test_the_summary_table_fits_a_1400px_window(rollout_run, tmp_path: Path):
    """Laid out by a browser at 1,400 px, the summary table is no wider than its box: no
    column (the last, "top patterns", was) is cut off or hidden behind a scroll bar."""
    import re
    import subprocess

    probe = (
        "<script>const w=document.querySelector('div.wide'),t=w.querySelector('table');"
        "document.body.setAttribute('data-fit',[t.scrollWidth,w.clientWidth].join(','));</script></body>"
    )
    page = tmp_path / "report.html"
    page.write_text((rollout_run.dir / "report.html").read_text(encoding="utf-8").replace("</body>", probe), encoding="utf-8")
    dom = subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    ).stdout
    table_width, box_width = map(int, re.search(r'data-fit="(\d+),(\d+)"', dom).groups())
    assert table_width <= box_width
