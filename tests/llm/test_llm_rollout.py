"""``rescue rollout dynamics=llm agent=llm`` against the loopback server: the run folder, the
usage report, injected faults, failed episodes, kill / Ctrl-C and resume, offline replay
from the cache, and no key on disk or in logs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from llm_episodes import SENTINEL, invoke, keys_of, lines_of, llm_args, small_data, varied_responder

from rescue_env.data import load_dialogues
from rescue_env.jsonl import decode, split_lines
from rescue_env.rollout import EPISODES_GZ, episodes_file
from rescue_env.llm.mock_server import Faults

REPO = Path(__file__).resolve().parents[2]
EPISODES = 2  # per seed dialogue: 1 couple + 1 family -> 4 episodes of agent llm


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return small_data(tmp_path_factory.mktemp("data"))


def expected_keys(data: Path) -> set[str]:
    return {f"rollout/llm/{d.sample_id}/ep{e}" for d in load_dialogues(data) for e in range(EPISODES)}


def usage_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())["llm"]


# --- end to end ---------------------------------------------------------------------------------


def test_llm_rollout_end_to_end_with_usage_report_and_no_key_written(serve, data, tmp_path, caplog):
    server = serve(varied_responder)
    run_dir = tmp_path / "run"
    run = invoke(llm_args(server.base_url, data, run_dir, "dynamics.annotator=llm"), env={"OPENAI_API_KEY": SENTINEL})
    assert run.rc == 0, run.err[-3000:]

    # every request went through openai.AsyncOpenAI with a JSON Schema, and carried the key
    requests = server.chat_requests
    names = {r.body["response_format"]["json_schema"]["name"] for r in requests}
    assert names == {"therapist_move", "client_turn", "relation_pattern"}
    for r in requests:
        assert r.headers["user-agent"].startswith("AsyncOpenAI/Python")
        assert r.headers["authorization"] == f"Bearer {SENTINEL}"
        fmt = r.body["response_format"]
        assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
        assert fmt["json_schema"]["schema"]["type"] == "object"

    # valid benchmark-schema episodes, one per key
    path = episodes_file(run_dir)
    dialogues = load_dialogues(path)
    assert sorted(keys_of(path)) == sorted(expected_keys(data))
    assert len(dialogues) == len(expected_keys(data))
    for obj, d in zip(lines_of(path), dialogues):
        assert obj["failed"] is False and obj["error"] == "" and isinstance(obj["sigma_return"], float)
        sim = [r for r in d.rows if r.extras.get("simulated")]
        clients = [r for r in sim if not r.is_therapist]
        assert clients and all(r.internal_emotion and r.dialogue_cleaned for r in clients)
        assert all(r.extras["state"]["members"] == d.participants for r in d.rows)
        assert len(obj["trace"]) == 4  # start + horizon 3

    # the usage report: printed, in metrics.json and in report.html
    usage = usage_of(run_dir)
    assert usage["calls"] == len(requests) and usage["failures"] == usage["retries"] == usage["cache_hits"] == 0
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert usage["episodes_run"] == 4 and usage["episodes_failed"] == 0 and usage["episodes_per_hour"] > 0
    assert usage["latency_p50_s"] <= usage["latency_p90_s"] <= usage["latency_p99_s"]
    assert usage["per_agent"]["llm"]["calls"] == usage["calls"]
    assert "LLM usage" in run.out and "episodes per hour" in run.out
    report = (run_dir / "report.html").read_text(encoding="utf-8")
    assert "<h2>LLM usage</h2>" in report and "latency p90" in report

    # the key is in no file of the run folder (.hydra included) and in no log line
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert any(".hydra" in p.parts for p in files) and (run_dir / "rollout.log").exists()
    assert not [p for p in files if SENTINEL.encode() in p.read_bytes()]
    assert SENTINEL not in run.out + run.err + caplog.text


# --- faults -------------------------------------------------------------------------------------

# the server's faults, retried (an empty choices list is one: it spends no re-ask)
TRANSPORT = {"rate_limit", "server_error", "stall", "empty_choices"}


@pytest.mark.parametrize("kind", ["rate_limit", "server_error", "stall", "truncated", "schema_violation", "empty_choices"])
def test_injected_faults_lose_no_episode(kind, serve, data, tmp_path):
    # the timeout leaves healthy replies ample time (the server shares this process), so
    # that every retry is an injected fault
    faults = Faults(rates={kind: 0.2}, retry_after="0.05", stall_s=1.3, seed=1)
    server = serve(varied_responder, faults=faults)
    run_dir = tmp_path / "run"
    run = invoke(llm_args(server.base_url, data, run_dir, "llm.max_retries=6", "llm.timeout_s=1", "report=false"))
    # exit 3 exactly when some episode failed (everything is written either way)
    assert run.rc == (3 if usage_of(run_dir)["episodes_failed"] else 0), run.err[-3000:]
    path = episodes_file(run_dir)
    keys = keys_of(path)
    assert sorted(keys) == sorted(expected_keys(data)), "no episode lost or duplicated"
    load_dialogues(path)
    usage = usage_of(run_dir)
    injected = sum(r.fault == kind for r in server.chat_requests)
    assert injected > 0
    if kind in TRANSPORT:
        # each 429 / 500 / stalled / choiceless reply is retried once (6 retries: none runs out)
        assert usage["retries"] == injected and usage["failures"] == 0 and usage["episodes_failed"] == 0
        assert usage["reasked"] == 0
    elif kind == "truncated":
        # a reply cut at max_tokens is repaired (json_repair) or, still unusable, sent again
        assert usage["repaired"] + usage["retries"] >= 1 and usage["retries"] <= injected
        assert usage["reasked"] == 0 and usage["failures"] == 0
    else:
        # an answer that fails the schema is asked again, up to llm.reasks=2 times; a call
        # fails only after three bad answers
        assert usage["reasked"] <= injected <= 3 * usage["reasked"] and usage["retries"] == 0
        assert injected == usage["reasked"] + sum(
            r.fault == kind for r in server.chat_requests if r.body["messages"][-1]["content"].startswith("Your previous reply")
        )
    failed = [o for o in lines_of(path) if o["failed"]]
    assert usage["episodes_failed"] == len(failed) <= usage["failures"]
    assert all(o["error"] for o in failed)
    assert set(usage["failed_episodes"]) == {o["sample_id"] for o in failed}


def test_twenty_percent_mixed_server_faults_lose_no_episode(serve, tmp_path):
    """Every seed dialogue, one full-length episode each, against a server whose replies are
    20 % faulty (429, 500, a reply cut at max_tokens, no choices): the client's retries absorb
    them all, and no re-ask is spent on them. No request meets more than 3 faults in a row
    (the default budget is 5 retries), so the run cannot fail by an unlucky streak."""
    rates = {"rate_limit": 0.05, "server_error": 0.05, "truncated": 0.05, "empty_choices": 0.05}
    server = serve(varied_responder, faults=Faults(rates=rates, retry_after="0", seed=1, max_in_a_row=3))
    run_dir = tmp_path / "run"
    args = [
        "rollout", f"hydra.run.dir={run_dir}", "dynamics=llm", "agent=llm", f"llm.base_url={server.base_url}",
        "llm.model=mock", "llm.backoff_initial_s=0.01", "llm.backoff_max_s=0.05", "episodes=1",
        "progress=false", "report=false",
    ]
    run = invoke(args)
    usage = usage_of(run_dir)
    assert run.rc == 0, run.err[-3000:]
    assert usage["episodes_run"] == 9 and usage["episodes_failed"] == 0 and usage["failures"] == 0
    injected = sum(r.fault is not None for r in server.chat_requests)
    assert injected > 50 and usage["retries"] == injected and usage["reasked"] == 0


def test_failed_episodes_are_recorded_with_their_reason_and_redone_on_rerun(serve, data, tmp_path):
    couple = next(d for d in load_dialogues(data) if d.scenario == "couple")
    broken = tuple(couple.participants)  # whoever speaks first in that couple's episodes fails

    def respond(body):  # these personas' replies are never valid JSON
        if any(f"You are {b}," in m["content"] for b in broken for m in body["messages"]):  # re-asks too
            return "I'd rather not answer in JSON."
        return varied_responder(body)

    server = serve(respond)
    run_dir = tmp_path / "run"
    args = llm_args(server.base_url, data, run_dir)
    run = invoke(args)
    assert run.rc == 3, run.err[-3000:]  # some episodes failed
    assert f"{EPISODES} of {2 * EPISODES} episodes failed: client " in run.err and any(f"client {b}: " in run.err for b in broken)
    path = episodes_file(run_dir)
    by_key = {f"rollout/llm/{o['seed_sample_id']}/ep{o['episode']}": o for o in lines_of(path)}
    assert set(by_key) == expected_keys(data)
    for key, obj in by_key.items():
        if obj["seed_sample_id"] == couple.sample_id:
            assert obj["failed"] is True and obj["error"].startswith(tuple(f"client {b}: " for b in broken))
        else:
            assert obj["failed"] is False
    usage = usage_of(run_dir)
    assert usage["episodes_failed"] == EPISODES and usage["failures"] >= EPISODES
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["agents"]["llm"]["failed"] == EPISODES and metrics["agents"]["llm"]["episodes"] == 2 * EPISODES
    assert any(f"client {b}: " in (run_dir / "report.html").read_text(encoding="utf-8") for b in broken)

    # the server is fixed: a rerun in the same folder redoes the failed episodes only
    healthy = serve(varied_responder)
    rerun = invoke([a if not a.startswith("llm.base_url=") else f"llm.base_url={healthy.base_url}" for a in args])
    assert rerun.rc == 0, rerun.err[-3000:]
    assert sorted(keys_of(path)) == sorted(expected_keys(data))
    assert not any(o["failed"] for o in lines_of(path))
    assert usage_of(run_dir)["episodes_run"] == EPISODES and usage_of(run_dir)["episodes_skipped"] == EPISODES
    assert {o["seed_sample_id"] for o in lines_of(path)[:EPISODES]} == {couple.sample_id}, "canonical order"


# --- interrupted runs -------------------------------------------------------------------------


def whole_lines(path: Path) -> int:
    """Episodes written whole so far (a member being appended is not counted)."""
    return decode(path.read_bytes()).data.count(b"\n")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["killed", "ctrl-c"])
def test_interrupted_run_resumes_to_the_same_file(sig, serve, data, tmp_path):
    hold = {"path": None}
    release = threading.Event()

    def respond(body):
        # once the watched run has written two episodes, hold every reply: the run is cut
        # mid-way, with episodes in flight, whenever the test interrupts it
        path = hold["path"]
        if path is not None and path.exists() and whole_lines(path) >= 2:
            release.wait(30)
        return varied_responder(body)

    server = serve(respond)
    extra = ("llm.max_concurrency=2", "report=false")
    whole = tmp_path / "whole"
    run = invoke(llm_args(server.base_url, data, whole, *extra))
    assert run.rc == 0, run.err[-3000:]

    cut = tmp_path / "cut"
    hold["path"] = episodes_file(cut)  # a new folder: the gzip file a run writes
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rescue_env.experiments.cli", *llm_args(server.base_url, data, cut, *extra)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (hold["path"].exists() and whole_lines(hold["path"]) >= 2):
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the run wrote no episode"
            time.sleep(0.01)
        time.sleep(0.2)  # requests of the other episodes are now held in flight
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        hold["path"] = None
        release.set()
    assert proc.returncode != 0
    if sig == signal.SIGINT:
        assert "interrupted" in err and "resume" in err
        assert proc.returncode == 130, proc.returncode  # the shell's code for Ctrl-C
    # whole gzip members of whole lines only, fewer than all episodes
    decoded = decode((cut / EPISODES_GZ).read_bytes())
    text = decoded.data.decode("utf-8")
    assert decoded.cut is None and text.endswith("\n") and 2 <= len(split_lines(text)) < len(expected_keys(data))
    assert all(json.loads(line) for line in split_lines(text))

    resumed = invoke(llm_args(server.base_url, data, cut, *extra))
    assert resumed.rc == 0, resumed.err[-3000:]
    assert usage_of(cut)["episodes_skipped"] == len(split_lines(text))
    assert (cut / EPISODES_GZ).read_bytes() == (whole / EPISODES_GZ).read_bytes()


# --- replay -------------------------------------------------------------------------------------


def test_replay_from_the_cache_with_the_server_stopped_is_byte_identical(serve, data, tmp_path):
    server = serve(varied_responder)
    cache = tmp_path / "cache"
    first = tmp_path / "first"
    extra = (f"llm.cache_dir={cache}", "dynamics.annotator=llm", "report=false")
    base_url = server.base_url
    run = invoke(llm_args(base_url, data, first, *extra))
    assert run.rc == 0, run.err[-3000:]
    sent = len(server.chat_requests)
    server.stop()

    replay = tmp_path / "replay"
    run = invoke(llm_args(base_url, data, replay, *extra, "llm.max_retries=0", "llm.timeout_s=1"))
    assert run.rc == 0, run.err[-3000:]
    assert (replay / EPISODES_GZ).read_bytes() == (first / EPISODES_GZ).read_bytes()
    usage = usage_of(replay)
    assert usage["calls"] == usage["cache_hits"] == sent and usage["failures"] == 0
    assert usage["prompt_tokens"] == 0  # nothing billed on replay


# --- other configurations -----------------------------------------------------------------------


def test_json_object_mode_for_servers_without_structured_outputs(serve, data, tmp_path):
    def respond(body):  # a server without json_schema: the schema is only in the prompt
        assert body["response_format"] == {"type": "json_object"}
        last = body["messages"][-1]["content"]  # the schema comes after the part every role shares
        schema = json.loads(last.split("matches this JSON Schema:\n", 1)[1])
        return varied_responder({**body, "response_format": {"type": "json_schema", "json_schema": {"schema": schema}}})

    server = serve(respond)
    run_dir = tmp_path / "run"
    run = invoke(llm_args(server.base_url, data, run_dir, "llm.structured_outputs=false", "dynamics.annotator=llm", "report=false"))
    assert run.rc == 0, run.err[-3000:]
    assert sorted(keys_of(episodes_file(run_dir))) == sorted(expected_keys(data))
    usage = usage_of(run_dir)
    assert usage["failures"] == usage["reasked"] == usage["episodes_failed"] == 0 and usage["calls"] == len(server.chat_requests)


def test_llm_clients_with_several_therapist_agents(serve, data, tmp_path):
    server = serve(varied_responder)
    run_dir = tmp_path / "run"
    args = [a for a in llm_args(server.base_url, data, run_dir, "report=false") if a != "agent=llm"]
    run = invoke([*args, "agents=[never,heuristic,llm]"])
    assert run.rc == 0, run.err[-3000:]
    path = episodes_file(run_dir)
    keys = keys_of(path)
    assert len(keys) == len(set(keys)) == 3 * len(expected_keys(data))
    assert [o["agent"] for o in lines_of(path)] == ["never"] * 2 + ["heuristic"] * 2 + ["llm"] * 2 + ["never"] * 2 + ["heuristic"] * 2 + ["llm"] * 2
    never = [o for o in lines_of(path) if o["agent"] == "never"]
    assert not any(r["primary_speaker"] == "Therapist" for o in never for r in o["rows"] if r.get("simulated"))
    usage = usage_of(run_dir)
    assert set(usage["per_agent"]) == {"never", "heuristic", "llm"}
    assert usage["per_agent"]["never"]["calls"] > 0  # its clients are LLM personas
    assert sum(s["calls"] for s in usage["per_agent"].values()) == usage["calls"]


def test_llm_therapist_with_calibrated_clients(serve, data, tmp_path):
    server = serve(varied_responder)
    run_dir = tmp_path / "run"
    args = [a for a in llm_args(server.base_url, data, run_dir, "report=false") if a != "dynamics=llm"]
    run = invoke(args)
    assert run.rc == 0, run.err[-3000:]
    assert {r.body["response_format"]["json_schema"]["name"] for r in server.chat_requests} == {"therapist_move"}
    assert usage_of(run_dir)["calls"] == len(server.chat_requests) == 3 * len(expected_keys(data))
