"""Hostile and failing servers: errors are named for what they are, no key reaches a run
folder, a cache, a log or the console whatever the server echoes, and a hanging server
cannot hold a call past ``llm.call_timeout_s``."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from llm_episodes import invoke, small_data

from rescue_env.llm import LLMClient, LLMConfig

#: Not shaped like any key: only the by-value net can catch it.
PLAIN_SENTINEL = "SENTINEL-plain-8c1d2e7f4b"
SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"], "additionalProperties": False}


class HostileServer:
    """A loopback server that answers every chat request with ``status`` and a body that
    quotes the request's Authorization header (``mode``: json | html | echo-reply | stall)."""

    def __init__(self, status: int = 500, mode: str = "json") -> None:
        self.status, self.mode = status, mode
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                self.rfile.read(int(self.headers.get("content-length") or 0))
                auth = self.headers.get("authorization", "")
                if outer.mode == "stall":
                    time.sleep(3)
                if outer.mode == "html":
                    body = f"<html><head><title>502 Bad Gateway</title></head><body>proxy saw {auth}</body></html>".encode()
                    ctype = "text/html"
                elif outer.mode == "echo-reply":
                    reply = {"choices": [{"message": {"content": f"sure, your header was {auth}"}}], "usage": {}}
                    body, ctype = json.dumps(reply).encode(), "application/json"
                else:
                    body = json.dumps({"error": {"message": f"rejected request with Authorization: {auth}", "type": "x"}}).encode()
                    ctype = "application/json"
                try:
                    self.send_response(outer.status)
                    self.send_header("content-type", ctype)
                    self.send_header("content-length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def hostile() -> Iterator:
    servers: list[HostileServer] = []

    def start(status: int = 500, mode: str = "json") -> HostileServer:
        servers.append(HostileServer(status, mode))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


def leaks(folder: Path, secret: str) -> list[str]:
    """Files under ``folder`` holding ``secret`` (raw, UTF-16, base64; in a gzip file's text too)."""
    from rescue_env.jsonl import decode

    needles = [secret.encode(), secret.encode("utf-16-le"), base64.b64encode(secret.encode())]
    return [
        str(p.relative_to(folder)) for p in folder.rglob("*")
        if p.is_file() and any(n in data for n in needles for data in (p.read_bytes(), decode(p.read_bytes()).data))
    ]


@pytest.mark.parametrize(("status", "mode"), [(400, "json"), (401, "json"), (403, "json"), (500, "json"), (502, "html"), (200, "echo-reply")])
def test_a_server_echoing_the_key_leaves_no_trace_of_it(hostile, tmp_path, status, mode):
    server = hostile(status, mode)
    data = small_data(tmp_path)
    out, cache = tmp_path / "run", tmp_path / "cache"
    run = invoke(
        ["rollout", f"hydra.run.dir={out}", "agents=[llm]", f"llm.base_url={server.base_url}", "llm.max_retries=0",
         f"llm.cache_dir={cache}", f"data.path={data}", "episodes=1", "env.horizon=3", "progress=false"],
        env={"OPENAI_API_KEY": PLAIN_SENTINEL},
    )
    # every episode failed: an honest exit code (a usable-but-odd reply: the therapist falls back to listening)
    assert run.rc == (0 if status == 200 else 3), run.err[-2000:]
    assert {"episodes.jsonl.gz", "metrics.json", "report.html", "rollout.log", ".hydra"} <= {p.name for p in out.iterdir()}
    assert leaks(out, PLAIN_SENTINEL) == []
    if cache.exists():
        assert leaks(cache, PLAIN_SENTINEL) == []
    assert PLAIN_SENTINEL not in run.out + run.err
    if status == 200:
        assert "re-asking therapist_move: the reply is not a JSON object" in run.out
        return
    errors = json.loads((out / "metrics.json").read_text())["llm"]["failed_episodes"].values()
    expected = {
        401: "HTTP 401: the server refused the key; check $OPENAI_API_KEY",
        403: "HTTP 403: the server refused the key",
        400: "HTTP 400: rejected request with Authorization: Bearer [redacted]",
        500: "HTTP 500: rejected request with Authorization: Bearer [redacted]",
        502: "HTTP 502: HTML page '502 Bad Gateway'",
    }[status]
    assert errors and all(expected in e for e in errors), list(errors)


def test_an_html_page_with_status_200_is_named(hostile):
    server = hostile(200, "html")
    client = LLMClient(LLMConfig(base_url=server.base_url, model="m", max_retries=0))
    result = asyncio_run(client.complete_json([{"role": "user", "content": "hi"}], SCHEMA, name="t"))
    assert not result.ok and result.error.startswith("the server's reply is an HTML page"), result.error
    assert "/v1" in result.error


def test_a_hanging_server_cannot_hold_a_call_past_the_call_deadline(hostile):
    server = hostile(200, "stall")  # each request hangs 3 s
    cfg = LLMConfig(base_url=server.base_url, model="m", timeout_s=1.0, max_retries=5, backoff_initial_s=0.01, call_timeout_s=1.5)
    client = LLMClient(cfg)
    t0 = time.perf_counter()
    result = asyncio_run(client.complete_json([{"role": "user", "content": "hi"}], SCHEMA, name="t"))
    elapsed = time.perf_counter() - t0
    assert not result.ok and "llm.call_timeout_s=1.5" in result.error
    assert elapsed < 2.5, f"{elapsed:.2f} s: the deadline did not bound the retries"


def test_connection_refused_is_not_reported_as_a_timeout():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = LLMClient(LLMConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=0))
    result = asyncio_run(client.complete_text([{"role": "user", "content": "hi"}]))
    assert result.error.startswith(f"connection refused by 127.0.0.1:{port}"), result.error
    assert "timed out" not in result.error.lower()


def test_dns_and_tls_failures_are_named():
    import socket
    import ssl

    import importlib
    import importlib.util

    import openai

    from rescue_env.llm.failures import describe_failure

    # the SDK's errors keep the request (newer SDKs read its headers to scrub them); its HTTP
    # library is httpx, or httpx2 in openai 3.x
    http = next(importlib.import_module(m) for m in ("httpx2", "httpx") if importlib.util.find_spec(m))
    request = http.Request("POST", "https://example.invalid/v1/chat/completions")

    def wrapped(cause: BaseException) -> openai.APIConnectionError:
        try:
            try:
                raise cause
            except BaseException as inner:
                raise openai.APITimeoutError(request=request) from inner
        except openai.APIConnectionError as exc:
            return exc

    kw = {"base_url": "https://example.invalid/v1", "api_key_env": "OPENAI_API_KEY", "timeout_s": 60}
    assert describe_failure(wrapped(socket.gaierror(-2, "Name or service not known")), **kw).startswith("cannot resolve the host")
    assert describe_failure(wrapped(ssl.SSLError(1, "WRONG_VERSION_NUMBER")), **kw).startswith("TLS failed with example.invalid")
    assert describe_failure(openai.APITimeoutError(request=request), **kw) == "no reply from example.invalid within llm.timeout_s=60s"


def asyncio_run(coro):
    import asyncio

    return asyncio.run(coro)


def test_an_unset_key_variable_for_a_remote_server_is_warned(monkeypatch, caplog):
    monkeypatch.delenv("RESCUE_TEST_UNSET_KEY", raising=False)
    with caplog.at_level("WARNING", logger="rescue_env.llm"):
        LLMClient(LLMConfig(base_url="https://api.example.com/v1", api_key_env="RESCUE_TEST_UNSET_KEY"))
    assert "$RESCUE_TEST_UNSET_KEY is not set" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="rescue_env.llm"):
        LLMClient(LLMConfig(base_url="http://127.0.0.1:8000/v1", api_key_env="RESCUE_TEST_UNSET_KEY"))
    assert caplog.text == ""  # a local server (vLLM, Ollama) needs none
    with caplog.at_level("WARNING", logger="rescue_env.llm"):
        LLMClient(LLMConfig(base_url=None, local={}, api_key_env="RESCUE_TEST_UNSET_KEY"))
    assert caplog.text == ""  # nor does the embedded one (llm=local)
