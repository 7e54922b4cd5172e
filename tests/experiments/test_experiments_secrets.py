"""Secrets: with ``OPENAI_API_KEY`` set to a sentinel, no file under a run folder (``.hydra/``,
logs, TensorBoard events, checkpoints, model, report), no printed line and no log record
contains it. The shared tiny rollout and training runs ran with the sentinel set; one more
rollout here runs with the OpenAI preset (whose ``api_key_env`` names that variable)."""

from __future__ import annotations

import base64
import os
import zipfile
from pathlib import Path

import pytest

from rescue_env.jsonl import decode
from rescue_env.rollout import EPISODES_GZ, episodes_file


def leaks(folder: Path, secret: str) -> list[str]:
    """Files under ``folder`` whose bytes contain ``secret`` (raw, UTF-16, base64, inside a
    zip member, or in a gzip file's text: the episodes file), as relative paths."""
    needles = [
        secret.encode(),
        secret.encode("utf-16-le"),
        base64.b64encode(secret.encode()),
    ]
    found = []
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert files, f"nothing written under {folder}"
    for p in files:
        raw = p.read_bytes()
        if any(n in data for n in needles for data in (raw, decode(raw).data)):  # gzip's text too
            found.append(str(p.relative_to(folder)))
        elif zipfile.is_zipfile(p):
            with zipfile.ZipFile(p) as z:
                for name in z.namelist():
                    if secret.encode() in z.read(name):
                        found.append(f"{p.relative_to(folder)}!{name}")
    return found


def test_the_shared_runs_wrote_the_files_scanned(rollout_run, train_run):
    r = {p.relative_to(rollout_run.dir).as_posix() for p in rollout_run.dir.rglob("*") if p.is_file()}
    assert {".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "rollout.log", EPISODES_GZ, "report.html"} <= r
    t = {p.relative_to(train_run.dir).as_posix() for p in train_run.dir.rglob("*") if p.is_file()}
    assert {".hydra/config.yaml", ".hydra/hydra.yaml", "train.log", "model.zip", "metrics.json"} <= t
    assert any(x.startswith("checkpoints/") for x in t) and any("tfevents" in x for x in t)
    # the key's variable is named in the saved rollout config, the key itself is not
    assert "api_key_env: OPENAI_API_KEY" in (rollout_run.dir / ".hydra" / "config.yaml").read_text()


def test_rollout_run_folder_and_output_hold_no_key(rollout_run, sentinel):
    assert os.environ.get("OPENAI_API_KEY") != sentinel, "the fixture restored the environment"
    assert leaks(rollout_run.dir, sentinel) == []
    assert sentinel not in rollout_run.out and sentinel not in rollout_run.err


def test_train_run_folder_and_output_hold_no_key(train_run, sentinel):
    assert leaks(train_run.dir, sentinel) == []
    assert sentinel not in train_run.out and sentinel not in train_run.err


def test_resumed_train_with_log_lines_leaks_nothing(train_run, rescue, tiny_train, tmp_path, sentinel):
    out = tmp_path / "resumed"
    ckpt = train_run.dir / "checkpoints" / "rl_model_128_steps.zip"
    run = rescue(["train", f"hydra.run.dir={out}", *tiny_train, f"resume={ckpt}"], env={"OPENAI_API_KEY": sentinel})
    assert run.rc == 0, run.err[-2000:]
    log_text = (out / "train.log").read_text()
    assert "resumed from" in log_text, "a log line was written (and scanned)"
    assert "resumed from" in run.out, "Hydra's console log is captured too"
    assert leaks(out, sentinel) == []
    assert sentinel not in run.out and sentinel not in run.err


def test_rollout_with_the_openai_preset_leaks_nothing(monkeypatch, tmp_path, sentinel, capsys):
    import sys

    from rescue_env.experiments.cli import main

    monkeypatch.setenv("OPENAI_API_KEY", sentinel)
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    out = tmp_path / "openai"
    rc = main(["rollout", f"hydra.run.dir={out}", "llm=openai", "episodes=1", "agents=[random]", "progress=false", "report=false"])
    assert rc == 0
    captured = capsys.readouterr()
    assert episodes_file(out).is_file() and (out / ".hydra" / "config.yaml").is_file()
    assert "api.openai.com" in (out / ".hydra" / "config.yaml").read_text()
    assert leaks(out, sentinel) == []
    assert sentinel not in captured.out and sentinel not in captured.err
    assert sentinel not in (out / "rollout.log").read_text()


def test_the_scanner_finds_a_planted_key(tmp_path, sentinel):
    # the scan itself can fail: plant the sentinel in a log, a nested file and a zip member
    (tmp_path / "a.log").write_text(f"key={sentinel}\n")
    (tmp_path / "tb").mkdir()
    (tmp_path / "tb" / "events").write_bytes(b"\x00\x01" + sentinel.encode() + b"\x00")
    with zipfile.ZipFile(tmp_path / "m.zip", "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("data", f"{{'k': '{sentinel}'}}" * 50)
    (tmp_path / "clean.txt").write_text("nothing here")
    assert sorted(leaks(tmp_path, sentinel)) == ["a.log", "m.zip!data", "tb/events"]


PASSWORD = "pw-SENTINEL-4c1d9e"


@pytest.mark.parametrize("sweep", [False, True], ids=["run", "sweep"])
def test_a_password_in_llm_base_url_is_refused_before_anything_is_written(rescue, tmp_path, sweep):
    """``llm.base_url=http://user:PASSWORD@host/v1``: one line naming the fix, exit 2, and
    the password in no file under the run (or sweep) folder and in no printed text."""
    url = f"http://someone:{PASSWORD}@127.0.0.1:9/v1"
    where = tmp_path / "out"
    args = ["rollout", *(["-m"] if sweep else []), "dynamics=llm", "episodes=1", "agents=[random]", "progress=false"]
    if sweep:
        args += [f"hydra.sweep.dir={where}", f"llm.base_url={url},http://127.0.0.1:9/v1"]
    else:
        args += [f"hydra.run.dir={where}", f"llm.base_url={url}"]
    run = rescue(args)
    assert run.rc == 2, run.err[-2000:]
    assert "llm.base_url" in run.err and "llm.api_key_env" in run.err and "Traceback" not in run.err
    assert PASSWORD not in run.out + run.err
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert [p for p in written if PASSWORD.encode() in p.read_bytes()] == []
    assert not (where / ".hydra").exists(), "refused before Hydra wrote the config"


def test_url_credentials_are_scrubbed_from_text():
    from rescue_env.secrets import has_url_credentials, scrub

    assert has_url_credentials(f"http://u:{PASSWORD}@host/v1") and has_url_credentials("https://token@host")
    assert not has_url_credentials("http://host:8000/v1") and not has_url_credentials("mail me at a@b.c")
    assert PASSWORD not in scrub(f"cannot reach http://u:{PASSWORD}@host/v1: refused")
