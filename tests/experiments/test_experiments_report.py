"""``rescue report RUN_DIR`` and ``rescue merge OUT SHARD...``: the report and plots come back
from the episodes file (gzip or plain, read alike), a judge section survives, another reference agent can be chosen (an
agent of the run), bad folders fail clearly with exit 2; merge never writes over a shard,
refuses shards run with other settings, and warns about (and counts) missing, partial and
failed shards, and merges gzip and plain shards into the form asked for; a JSON string
holding U+2028 / U+2029 / U+0085 reads back everywhere."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from rescue_env.experiments.cli import main
from rescue_env.jsonl import decode, encode_line, encode_lines, read_text, split_lines
from rescue_env.rollout import EPISODES_GZ, EPISODES_PLAIN, episodes_file


def text_lines(path: Path) -> list[str]:
    return split_lines(read_text(path))


def as_plain(folder: Path) -> Path:
    """The folder's gzip episodes file made the plain ``episodes.jsonl`` of an older version."""
    plain = folder / EPISODES_PLAIN
    plain.write_bytes(decode((folder / EPISODES_GZ).read_bytes()).data)
    (folder / EPISODES_GZ).unlink()
    return plain


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
    assert main(["report", str(tmp_path)]) == 2
    assert "rescue report: error:" in capsys.readouterr().err


def test_a_train_folder_says_which_rollout_to_run(train_run, capsys):
    assert main(["report", str(train_run.dir)]) == 2
    err = capsys.readouterr().err
    assert "`rescue train` run folder" in err and f"rescue rollout policy={train_run.dir / 'model.zip'}" in err


def test_report_compare_to_must_name_an_agent_of_the_run(rollout_run, tmp_path: Path, capsys):
    run = tmp_path / "run"
    shutil.copytree(rollout_run.dir, run)
    before = (run / "report.html").read_bytes()
    assert main(["report", str(run), "--compare-to", "Heuristic"]) == 2
    err = capsys.readouterr().err
    assert "'Heuristic' is not an agent of this run" in err and "never, heuristic" in err
    assert (run / "report.html").read_bytes() == before


@pytest.mark.parametrize("form", ["gzip", "plain"])
def test_report_names_the_line_that_is_not_an_episode(rollout_run, tmp_path: Path, capsys, form):
    run = tmp_path / "run"
    shutil.copytree(rollout_run.dir, run)
    path = episodes_file(run) if form == "gzip" else as_plain(run)
    with path.open("ab") as fh:
        fh.write(encode_line("{torn", compress=form == "gzip"))
    n = len(text_lines(path))
    assert main(["report", str(run)]) == 2
    assert f"{path.name}:{n}: not valid JSON" in capsys.readouterr().err


def test_report_names_where_a_gzip_file_is_cut(rollout_run, tmp_path: Path, capsys):
    run = tmp_path / "run"
    shutil.copytree(rollout_run.dir, run)
    path = episodes_file(run)
    n = len(text_lines(path))
    path.write_bytes(path.read_bytes()[:-100])  # a killed write: the last member is cut
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{path.name}:{n}: the file ends inside the gzip member" in err and f"the {n - 1} lines before it are whole" in err


def test_report_reads_the_gzip_and_the_plain_form_alike(rollout_run, tmp_path: Path):
    from rescue_env.experiments.report import load_records

    gz, plain = tmp_path / "gz", tmp_path / "plain"
    shutil.copytree(rollout_run.dir, gz)
    shutil.copytree(rollout_run.dir, plain)
    as_plain(plain)
    assert main(["report", str(gz)]) == main(["report", str(plain)]) == 0
    as_dicts = {k: [r.to_json() for r in v] for k, v in load_records(gz).items()}
    assert as_dicts == {k: [r.to_json() for r in v] for k, v in load_records(plain).items()} and as_dicts
    def tables(folder: Path) -> list[str]:
        # the two reports were made a moment apart: their "date" row may differ by a minute
        html = re.sub(r"<td><b>date</b></td><td>[^<]*</td>", "", (folder / "report.html").read_text(encoding="utf-8"))
        return ["<table" + part.split("</table>")[0] for part in html.split("<table")[1:]]

    assert tables(gz) and tables(gz) == tables(plain)


def test_shards_merge_into_the_unsharded_run(rollout_run, shards, tmp_path: Path, capsys):
    import json

    sizes = [len(text_lines(episodes_file(d))) for d in shards]
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
    assert merged["merge"] == {"shards": 2, "missing_shards": [], "partial_shards": {}, "episodes_missing": 0,
                               "episodes_failed": 0, "episodes_repeated": 0, "warnings": []}
    assert (out / "report.html").is_file() and (out / "summary.csv").is_file()
    assert episodes_file(out).name == EPISODES_GZ and sorted(text_lines(episodes_file(out))) == sorted(
        line for d in shards for line in text_lines(episodes_file(d))
    )


def test_merge_joins_gzip_and_plain_shards_into_the_form_asked_for(shards, tmp_path: Path, capsys):
    s0, s1 = copies(shards, tmp_path)
    as_plain(s1)  # a shard run by an older version, or with compress=false
    gz, plain = tmp_path / "gz", tmp_path / "plain"
    assert main(["merge", str(gz), str(s0), str(s1)]) == 0
    assert main(["merge", str(plain), str(s0), str(s1), "--plain"]) == 0, capsys.readouterr().err
    assert episodes_file(gz) == gz / EPISODES_GZ and not (gz / EPISODES_PLAIN).exists()
    assert episodes_file(plain) == plain / EPISODES_PLAIN and not (plain / EPISODES_GZ).exists()
    assert (plain / EPISODES_PLAIN).read_bytes() == decode((gz / EPISODES_GZ).read_bytes()).data
    assert len(text_lines(plain / EPISODES_PLAIN)) == 18


def test_a_bad_shard_is_a_clear_error(rescue, tmp_path: Path):
    run = rescue(["rollout", f"hydra.run.dir={tmp_path / 'x'}", "episodes=1", "agents=[never]", "shard=2/2", "progress=false"])
    assert run.rc != 0 and "need 0 ≤ i < n" in run.err


# --- merge ------------------------------------------------------------------------------------

SEPARATED_REPLY = "I hear you.\u2028You both\u2029want\u0085rest."


@pytest.fixture(scope="module")
def shards(tmp_path_factory, rescue, rollout_args) -> list[Path]:
    """Shards 0/2 and 1/2 of the shared tiny rollout (5 + 4 seed dialogues, 2 agents)."""
    root = tmp_path_factory.mktemp("shards")
    out = []
    for i in (0, 1):
        d = root / f"s{i}"
        run = rescue(["rollout", f"hydra.run.dir={d}", *rollout_args, f"shard={i}/2", "report=false"])
        assert run.rc == 0, run.err[-2000:]
        out.append(d)
    return out


def copies(shards: list[Path], tmp_path: Path) -> list[Path]:
    out = []
    for s in shards:
        shutil.copytree(s, tmp_path / s.name)
        out.append(tmp_path / s.name)
    return out


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_merge_refuses_a_run_folder_as_out(shards, tmp_path: Path, capsys):
    """``rescue merge s0 s1``: OUT forgotten; s0 is not written over."""
    s0, s1 = copies(shards, tmp_path)
    before = snapshot(s0)
    assert main(["merge", str(s0), str(s1)]) == 2
    err = capsys.readouterr().err
    assert "rescue merge: error:" in err and "is a run folder" in err and "OUT forgotten" in err and "usage: rescue merge OUT" in err
    assert snapshot(s0) == before
    assert main(["merge", str(s1), str(s0), str(s1)]) == 2  # OUT among the shards
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep me")
    assert main(["merge", str(tmp_path / "notes"), str(s0), str(s1)]) == 2
    assert (tmp_path / "notes" / "mine.txt").read_text() == "keep me"


def test_merge_replaces_an_earlier_merge_only_with_overwrite(shards, tmp_path: Path, capsys):
    out = tmp_path / "merged"
    assert main(["merge", str(out), *map(str, shards)]) == 0
    assert main(["merge", str(out), *map(str, shards)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(["merge", str(out), *map(str, shards), "--overwrite"]) == 0


def test_merge_refuses_shards_run_with_other_settings(shards, tmp_path: Path, capsys):
    import json

    import yaml

    s0, s1 = copies(shards, tmp_path)
    record = json.loads((s1 / "run_config.json").read_text())
    record["reward"]["lam"] = 3.0
    (s1 / "run_config.json").write_text(json.dumps(record))
    out = tmp_path / "merged"
    assert main(["merge", str(out), str(s0), str(s1)]) == 2
    err = capsys.readouterr().err
    assert "different settings" in err and "reward.lam (s0: 1.0, s1: 3.0)" in err
    assert not out.exists()
    record["reward"]["lam"] = 1.0
    (s1 / "run_config.json").write_text(json.dumps(record))
    config = yaml.safe_load((s1 / ".hydra" / "config.yaml").read_text())
    config["episodes"] = 2
    (s1 / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    assert main(["merge", str(out), str(s0), str(s1)]) == 2
    assert "episodes (s0: 1, s1: 2)" in capsys.readouterr().err


def test_merge_warns_about_and_counts_a_killed_shard(shards, tmp_path: Path, capsys):
    import json

    s0, s1 = copies(shards, tmp_path)
    path = episodes_file(s1)
    path.write_bytes(encode_lines(text_lines(path)[:3], compress=True))  # killed after 3 of 8
    (s1 / "metrics.json").unlink()
    out = tmp_path / "merged"
    assert main(["merge", str(out), str(s0), str(s1)]) == 3
    err = capsys.readouterr().err
    assert "warning:" in err and "holds 3 of the 8 episodes its config plans" in err
    merge = json.loads((out / "metrics.json").read_text())["merge"]
    assert merge["partial_shards"] == {str(s1): {"present": 3, "planned": 8}} and merge["episodes_missing"] == 5


def test_merge_warns_about_and_counts_a_missing_shard(shards, tmp_path: Path, capsys):
    import json

    out = tmp_path / "merged"
    assert main(["merge", str(out), str(shards[0])]) == 3
    assert "shard(s) 1/2 of 2 not given" in capsys.readouterr().err
    merge = json.loads((out / "metrics.json").read_text())["merge"]
    assert merge["missing_shards"] == ["1/2"] and merge["shards"] == 1


def test_merge_warns_when_the_same_episodes_are_given_twice(rollout_run, tmp_path: Path, capsys):
    """One unsharded run given twice (or two unsharded runs of one config): the episodes are
    pooled once, and the merge says so instead of looking like a run of twice the size."""
    import json
    import shutil

    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(rollout_run.dir, a)
    shutil.copytree(rollout_run.dir, b)
    out = tmp_path / "merged"
    assert main(["merge", str(out), str(a), str(b)]) == 3
    n = len(text_lines(episodes_file(a)))
    assert f"{n} episode(s) appear in more than one folder" in capsys.readouterr().err
    merged = json.loads((out / "metrics.json").read_text())
    assert merged["merge"]["episodes_repeated"] == n and len(text_lines(episodes_file(out))) == n


def test_merge_and_report_read_a_reply_holding_line_separators(shards, tmp_path: Path, capsys):
    """An LLM reply holding U+2028, U+2029 and U+0085, written raw into the episodes file (as
    ``json.dumps(..., ensure_ascii=False)`` writes it), splits no line."""
    import json

    s0, s1 = copies(shards, tmp_path)
    path = episodes_file(s1)
    lines = text_lines(path)
    obj = json.loads(lines[1])
    obj["rows"][-1]["dialogue_cleaned"] = SEPARATED_REPLY
    lines[1] = json.dumps(obj, ensure_ascii=False)
    path.write_bytes(encode_lines(lines, compress=True))
    assert "\u2028" in read_text(path)
    assert main(["report", str(s1)]) == 0, capsys.readouterr().err
    out = tmp_path / "merged"
    assert main(["merge", str(out), str(s0), str(s1), "--compare-to", "never"]) == 0, capsys.readouterr().err
    merged = read_text(episodes_file(out))
    assert SEPARATED_REPLY in merged and len(merged.split("\n")) - 1 == 18
    assert json.loads((out / "metrics.json").read_text())["compare_to"] == "never"


def test_merge_user_errors_exit_2(shards, tmp_path: Path, capsys):
    assert main(["merge", str(tmp_path / "m1"), str(shards[0]), str(tmp_path / "nowhere")]) == 2
    assert f"{tmp_path / 'nowhere'} does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["merge", str(tmp_path / "m1"), str(shards[0]), str(tmp_path / "empty")]) == 2
    assert "not a `rescue rollout` run folder" in capsys.readouterr().err
    assert main(["report", str(episodes_file(shards[0]))]) == 2  # the file, not its folder
    assert "is not a folder (give a `rescue rollout` run folder)" in capsys.readouterr().err
    assert main(["merge", str(tmp_path / "m2"), *map(str, shards), "--compare-to", "bogus"]) == 2
    assert "'bogus' is not an agent of this run" in capsys.readouterr().err
    assert not (tmp_path / "m1").exists()


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
