"""A scriptable OpenAI-compatible Chat Completions server on loopback, for tests and benchmarks.

It speaks enough of the protocol for ``openai.AsyncOpenAI`` (``POST /v1/chat/completions``,
``GET /v1/models``), records every request, and injects the faults a real server shows:
429 with ``Retry-After``, 500, a stall beyond the client's timeout, truncated JSON (a reply
cut at ``max_tokens``), schema-violating JSON, an empty ``choices`` list and a 200 body cut
mid-JSON, plus a fixed latency per reply.

    with MockLLMServer(latency_s=0.05, faults=Faults(schedule=["rate_limit"])) as server:
        client = LLMClient(LLMConfig(base_url=server.base_url, model="mock"))
        ...
        assert server.requests[0].body["response_format"]["type"] == "json_schema"

``flavour="llama_cpp"`` behaves as ``llama-cpp-python``'s server does (``python -m
llama_cpp.server``): it refuses ``response_format`` ``json_schema`` with the same HTTP 500,
takes ``{"type": "json_object", "schema": ...}`` and answers it with a schema instance (its
grammar), answers plain ``json_object`` with ``{}`` (an unguided small model), and serves one
request at a time (the others wait in its queue, as behind llama.cpp's lock).

Run ``python -m rescue_env.llm.mock_server --port 8000`` to point any tool at it.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, get_args

Flavour = Literal["openai", "llama_cpp"]
FLAVOURS: tuple[Flavour, ...] = get_args(Flavour)

FaultKind = Literal["rate_limit", "server_error", "stall", "truncated", "schema_violation", "empty_choices", "cut_body"]
FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)

Responder = Callable[[dict[str, Any]], "str | dict[str, Any]"]
"""Maps a request body to the assistant message content (a dict is sent as JSON text)."""


@dataclass
class Faults:
    """Which chat requests fail, and how.

    Request ``i`` (counted from 0 in arrival order) gets ``schedule[i]`` while the schedule
    lasts (None: no fault); after it, each request draws one fault from ``rates``
    (kind -> probability, summing to at most 1) with a generator seeded by ``seed``.
    """

    schedule: Sequence[FaultKind | None] = ()
    rates: Mapping[FaultKind, float] = field(default_factory=dict)
    retry_after: str | None = "1"
    """``Retry-After`` header value of 429 replies (seconds or an HTTP date); None omits it."""
    stall_s: float = 5.0
    """How long a ``stall`` request hangs before answering (set it above the client timeout)."""
    seed: int = 0
    max_in_a_row: int | None = None
    """Most drawn faults one request (the same body, retried) meets in a row; after that it is
    answered. None: no cap. A test of a client's retry budget sets it below the budget: with
    rates alone, a streak longer than the budget happens by chance (0.2**6 per call at 20 %
    and 5 retries) and the test would fail once in a few dozen runs."""

    def __post_init__(self) -> None:
        unknown = {k for k in [*self.schedule, *self.rates] if k is not None} - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; choose from {FAULT_KINDS}")
        if sum(self.rates.values()) > 1:
            raise ValueError("fault rates sum to more than 1")


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    """Header names lower-cased."""
    body: dict[str, Any] | None
    fault: FaultKind | None


def schema_instance(schema: dict[str, Any], rng: random.Random | None = None) -> Any:
    """A small instance valid for ``schema`` (the common subset structured outputs use).

    Enums and ``anyOf``/``oneOf`` take their first option, or a choice of ``rng`` when
    given; strings are ``"ok"`` (padded to ``minLength``); numbers their ``minimum`` (or 0);
    arrays ``max(1, minItems)`` items; objects all their properties. Local ``$ref``s resolve.
    """

    def build(node: dict[str, Any]) -> Any:
        if "$ref" in node:
            target: Any = schema
            for part in node["$ref"].removeprefix("#/").split("/"):
                target = target[part]
            return build(target)
        pick = rng.choice if rng else (lambda options: options[0])
        if "const" in node:
            return node["const"]
        if "enum" in node:
            return pick(node["enum"])
        for key in ("anyOf", "oneOf"):
            if key in node:
                return build(pick(node[key]))
        if "allOf" in node:
            return build({k: v for part in node["allOf"] for k, v in part.items()})
        kind = node.get("type", "object" if "properties" in node else "string")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind == "object":
            return {name: build(sub) for name, sub in node.get("properties", {}).items()}
        if kind == "array":
            return [build(node.get("items", {})) for _ in range(max(1, node.get("minItems", 0)))]
        if kind in ("integer", "number"):
            low = node.get("minimum", 0)
            return int(low) if kind == "integer" else float(low)
        if kind == "boolean":
            return False
        if kind == "null":
            return None
        text = "ok".ljust(node.get("minLength", 0), "k")
        return text[: node["maxLength"]] if "maxLength" in node else text

    return build(schema)


def schema_responder(seed: int | None = None) -> Responder:
    """The default responder: ``schema_instance`` of the request's ``json_schema`` response
    format, or of the ``schema`` of a llama.cpp-style ``json_object`` one (options picked by
    a generator seeded with ``seed``, or always the first when None); ``{}`` for plain
    ``json_object`` requests, whose schema is only in the prompt (script a responder for
    those); ``"ok"`` for text."""
    rng = None if seed is None else random.Random(seed)

    def respond(request: dict[str, Any]) -> str | dict[str, Any]:
        response_format = request.get("response_format") or {}
        if response_format.get("type") == "json_schema":
            return schema_instance(response_format["json_schema"]["schema"], rng)
        if response_format.get("type") == "json_object":
            schema = response_format.get("schema")
            return schema_instance(schema, rng) if isinstance(schema, dict) else {}
        return "ok"

    return respond


def _tokens(text: str) -> int:
    # About four characters per token, enough for usage accounting in tests.
    return max(1, len(text) // 4)


def _violate(content: str) -> str:
    """Same keys, every value null: JSON that parses but breaks any non-nullable schema."""
    try:
        parsed = json.loads(content)
    except json.JSONDecodeError:
        parsed = None
    return json.dumps({k: None for k in parsed} if isinstance(parsed, dict) and parsed else [])


class MockLLMServer:
    """Chat Completions server on ``127.0.0.1`` in a background thread; a context manager.

    Args:
        responder: decides each reply's content (default: ``schema_responder()``).
        faults: fault injection (default: none).
        latency_s: added before every 200 reply (injected 429s and 500s come at once, as
            from a gateway in front of a busy model).
        model: name listed by ``GET /v1/models``.
        require_key: if set, chat requests with another key get a 401 that quotes the key
            they sent (as OpenAI's does), to test that callers never pass it on.
        port: 0 picks a free port.
        flavour: ``"openai"`` (structured outputs, any number of requests at once) or
            ``"llama_cpp"`` (as ``llama-cpp-python``'s server: see the module docstring).
        ignore_schema: a ``json_object`` request's ``schema`` is accepted but not enforced
            (the reply is ``{}``), as a JSON-mode server that does not know the extension.
    """

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        faults: Faults | None = None,
        latency_s: float = 0.0,
        model: str = "mock-model",
        require_key: str | None = None,
        port: int = 0,
        flavour: Flavour = "openai",
        ignore_schema: bool = False,
    ) -> None:
        if flavour not in FLAVOURS:
            raise ValueError(f"flavour must be one of {FLAVOURS}, not {flavour!r}")
        self.responder = responder or schema_responder()
        self.flavour = flavour
        self.ignore_schema = ignore_schema
        self._one_at_a_time = threading.Lock()
        self._in_flight = 0
        self.max_in_flight = 0
        """Most chat requests the server was working on at once (llama_cpp: 1)."""
        self.faults = faults or Faults()
        self.latency_s = latency_s
        self.model = model
        self.require_key = require_key
        self._port = port
        self._rng = random.Random(self.faults.seed)
        self._streaks: dict[str, int] = {}  # faults in a row per request body (Faults.max_in_a_row)
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._chat_count = 0
        self._closing = threading.Event()
        self._connections: set[socket.socket] = set()
        self._httpd: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        """The ``base_url`` to give a client, e.g. ``http://127.0.0.1:PORT/v1``."""
        if self._httpd is None:
            raise RuntimeError("MockLLMServer is not running; call start() or use it as a context manager")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        """A copy of every request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        """The ``/chat/completions`` requests among ``requests``."""
        return [r for r in self.requests if r.path.rstrip("/") == "/v1/chat/completions"]

    def start(self) -> MockLLMServer:
        """Bind the port and serve from a daemon thread; returns ``self``."""
        self._closing.clear()
        handler = type("Handler", (_Handler,), {"mock": self})
        self._httpd = _Server(("127.0.0.1", self._port), handler)
        # A short poll interval makes stop() quick (shutdown waits for one poll).
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="mock-llm-server", daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop serving and drop open connections (stalled requests return at once)."""
        if self._httpd is None:
            return
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:
            # Kept-alive connections would otherwise still be served by their threads.
            for conn in self._connections:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        self._httpd = None

    def __enter__(self) -> MockLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _next_fault(self, body: dict[str, Any]) -> tuple[int, FaultKind | None]:
        """The request's index and its fault."""
        with self._lock:
            index = self._chat_count
            self._chat_count += 1
            if index < len(self.faults.schedule):
                return index, self.faults.schedule[index]
            draw = self._rng.random()
            cap = self.faults.max_in_a_row
            key = json.dumps(body, sort_keys=True) if cap is not None else ""
            fault = self._draw(draw) if cap is None or self._streaks.get(key, 0) < cap else None
            if cap is not None:
                self._streaks[key] = self._streaks.get(key, 0) + 1 if fault else 0
        return index, fault

    def _draw(self, draw: float) -> FaultKind | None:
        for kind, rate in self.faults.rates.items():
            if draw < rate:
                return kind
            draw -= rate
        return None

    def _completion(self, index: int, body: dict[str, Any], fault: FaultKind | None) -> dict[str, Any]:
        response_format = body.get("response_format") or {}
        if self.ignore_schema and response_format.get("type") == "json_object":
            body = {**body, "response_format": {"type": "json_object"}}
        content = self.responder(body)
        if not isinstance(content, str):
            content = json.dumps(content)
        if fault == "truncated":
            content = content[: len(content) // 2]
        elif fault == "schema_violation":
            content = _violate(content)
        prompt = _tokens(json.dumps(body.get("messages", [])))
        completion = _tokens(content)
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": "length" if fault == "truncated" else "stop",
            "logprobs": None,
        }
        return {
            "id": f"chatcmpl-mock-{index}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [] if fault == "empty_choices" else [choice],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 1024  # the default backlog of 5 drops bursts of new connections


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the openai client expects
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms ACK wait
    mock: MockLLMServer

    def setup(self) -> None:
        super().setup()
        with self.mock._lock:
            self.mock._connections.add(self.connection)

    def finish(self) -> None:
        with self.mock._lock:
            self.mock._connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass  # the client hung up (e.g. after its timeout)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: tests read ``requests`` instead

    def _record(self, body: dict[str, Any] | None, fault: FaultKind | None) -> None:
        headers = {name.lower(): value for name, value in self.headers.items()}
        record = RecordedRequest(self.command, self.path, headers, body, fault)
        with self.mock._lock:
            self.mock._requests.append(record)

    def _send(self, status: int, payload: dict[str, Any], headers: Mapping[str, str] | None = None, cut: bool = False) -> None:
        data = json.dumps(payload).encode()
        data = data[: len(data) // 2] if cut else data
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True  # the client gave up on this request

    def do_GET(self) -> None:
        self._record(None, None)
        if self.path.rstrip("/") == "/v1/models":
            model = {"id": self.mock.model, "object": "model", "created": 0, "owned_by": "rescue-env"}
            self._send(200, {"object": "list", "data": [model]})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.mock.flavour == "llama_cpp" and self.path.rstrip("/") == "/extras/tokenize/count":
            # llama-cpp-python's tokenizer endpoint (the count only)
            self._record(body, None)
            self._send(200, {"count": _tokens(str(body.get("input", "")))})
            return
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._record(body, None)
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        mock = self.mock
        index, fault = mock._next_fault(body)
        self._record(body, fault)
        sent_key = self.headers.get("Authorization", "").removeprefix("Bearer ")
        if mock.require_key is not None and sent_key != mock.require_key:
            self._send(401, {"error": {"message": f"Incorrect API key provided: {sent_key}", "type": "auth"}})
        elif fault == "rate_limit":
            headers = {} if mock.faults.retry_after is None else {"Retry-After": mock.faults.retry_after}
            self._send(429, {"error": {"message": "rate limited (injected)", "type": "rate_limit"}}, headers)
        elif fault == "server_error":
            self._send(500, {"error": {"message": "server error (injected)", "type": "server_error"}})
        elif mock.flavour == "llama_cpp" and (body.get("response_format") or {}).get("type") not in (None, "text", "json_object"):
            # llama-cpp-python's pydantic validation of the request, answered as a 500
            kind = body["response_format"].get("type")
            message = (
                "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
                f"'msg': \"Input should be 'text' or 'json_object'\", 'input': '{kind}'}}"
            )
            self._send(500, {"error": {"message": message, "type": "internal_server_error", "param": None, "code": None}})
        elif mock.flavour == "llama_cpp":
            with mock._one_at_a_time:  # one request at a time, the rest queue
                self._reply(index, body, fault)
        else:
            self._reply(index, body, fault)

    def _reply(self, index: int, body: dict[str, Any], fault: FaultKind | None) -> None:
        mock = self.mock
        with mock._lock:
            mock._in_flight += 1
            mock.max_in_flight = max(mock.max_in_flight, mock._in_flight)
        try:
            mock._closing.wait(mock.latency_s + (mock.faults.stall_s if fault == "stall" else 0.0))
            payload = mock._completion(index, body, fault)
        finally:
            with mock._lock:
                mock._in_flight -= 1
        self._send(200, payload, cut=fault == "cut_body")


def main(argv: Sequence[str] | None = None) -> None:
    """Serve until Ctrl-C: ``python -m rescue_env.llm.mock_server --port 8000 --latency 0.2``."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added before every 200 reply")
    parser.add_argument(
        "--fault", action="append", default=[], metavar="KIND=RATE", help=f"inject a fault; KIND in {FAULT_KINDS}"
    )
    parser.add_argument("--retry-after", default="1", help="Retry-After value of injected 429s")
    parser.add_argument("--flavour", choices=FLAVOURS, default="openai", help="llama_cpp: behave as llama-cpp-python's server")
    args = parser.parse_args(argv)
    rates = {kind: float(rate) for kind, rate in (item.split("=") for item in args.fault)}
    faults = Faults(rates=rates, retry_after=args.retry_after)  # type: ignore[arg-type]
    with MockLLMServer(faults=faults, latency_s=args.latency, port=args.port, flavour=args.flavour) as server:
        print(f"serving Chat Completions at {server.base_url} (Ctrl-C stops)", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
