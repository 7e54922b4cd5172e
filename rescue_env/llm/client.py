"""One async client for every LLM call of the project, over ``openai.AsyncOpenAI``.

``LLMClient.complete_json`` sends a Chat Completions request whose JSON Schema travels in
``response_format`` (in the strongest form the server takes, found on the first call:
:mod:`rescue_env.llm.capabilities`), and returns an ``LLMResult`` whatever the model or
server does:

    cache lookup -> request (concurrency bounded and adapted to the server,
    :mod:`rescue_env.llm.adaptive`; retries with backoff on 429, 5xx, timeouts, connection
    errors and replies the server spoiled — no ``choices``, a body cut mid-JSON, a reply cut
    at ``max_tokens`` that is not usable — honouring Retry-After) -> parse (code fences
    stripped, ``json_repair`` on malformed JSON, numbers and arrays clamped to their bounds)
    -> validate (``jsonschema``) -> if the model's answer is unusable, re-ask up to
    ``llm.reasks`` times with the bad reply and a correction -> else ``ok=False`` with the
    reason.

The two budgets are apart: ``llm.max_retries`` is spent on the server's faults, ``llm.reasks``
only on answers that fail the schema.

Model-side and server-side problems never raise; programmer errors (a bad schema or
name) do. A failure is named for what it is (:mod:`rescue_env.llm.failures`), every text
from the server passes the secret scrubber, and ``call_timeout_s`` bounds a whole call.
Usage is accounted per run (``client.usage()``), per tag, e.g. an episode
(``client.usage(tag)``), and per role (``client.usage_by_role()``).
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import json
import logging
import os
import re
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

import json_repair
import openai
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_random_exponential

from rescue_env.concurrency import RETRY_PRIORITY, PriorityLimiter
from rescue_env.llm import capabilities
from rescue_env.llm.adaptive import AdaptiveConcurrency
from rescue_env.llm.cache import ResponseCache, fingerprint
from rescue_env.llm.capabilities import FormatNegotiator, FormatRejected
from rescue_env.llm.config import LLMConfig
from rescue_env.llm.failures import describe_body, describe_failure
from rescue_env.llm.tokens import Messages, Prompt, TokenCounter, reply_budget
from rescue_env.llm.usage import Usage, UsageStats
from rescue_env.secrets import register_secret_env, scrub

log = logging.getLogger("rescue_env.llm")

T = TypeVar("T")

DUMMY_API_KEY = "EMPTY"
"""Sent when the variable named by ``LLMConfig.api_key_env`` is unset (vLLM, Ollama)."""
MAX_RETRY_AFTER_S = 120.0
"""Longest ``Retry-After`` honoured, as in the OpenAI SDK: beyond it the server is down."""
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_FENCE_RE = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.DOTALL)
_REASK = (
    "Your previous reply could not be used ({error}). Reply again with only one JSON object "
    "that matches the required schema, with no other text."
)


@dataclass
class LLMResult:
    """Outcome of one logical call (its retries and re-ask included)."""

    data: dict[str, Any] | None
    """The parsed reply, valid for the schema; None on failure or for ``complete_text``."""
    ok: bool
    error: str = ""
    """Why the call failed (empty when ``ok``)."""
    raw_text: str = ""
    """The last reply's text as the model wrote it (before repair)."""
    repaired: bool = False
    """``data`` comes from a reply that ``json_repair`` had to fix."""
    reasked: bool = False
    """The first reply was unusable and the model was asked again (up to ``llm.reasks`` times)."""
    cached: bool = False
    """Every reply came from the on-disk cache (no request was sent)."""
    usage: Usage = field(default_factory=Usage)
    """Tokens of all replies, as the server reported them (also for cached replies)."""
    latency_s: float = 0.0
    """Wall time of the call, backoff waits and re-ask included."""
    retries: int = 0
    """HTTP attempts repeated after a 429, 5xx, timeout, connection error or spoiled reply."""


@dataclass(frozen=True)
class _Reply:
    text: str | None  # None: the server returned no choice
    usage: Usage
    cached: bool
    retries: int


class PromptTooLong(Exception):
    """Even the shortest transcript window of a :class:`Prompt` does not fit the context."""


@functools.lru_cache(maxsize=256)
def _reply_budget(schema_json: str) -> int:
    """``max_tokens`` of a reply to this schema (per role: a client turn needs far fewer than a
    judge's rubric)."""
    return reply_budget(capabilities.grammar_schema(json.loads(schema_json)))


def _api_root(base_url: str) -> str:
    """The server's root URL: ``base_url`` without its trailing ``/v1``."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


class _CallFailed(Exception):
    def __init__(self, reason: str, retries: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retries = retries


class _ServerFault(Exception):
    """A 2xx reply the server spoiled (no choice, a body cut mid-JSON, a reply cut at
    ``max_tokens`` that cannot be used): retried like a 5xx, not re-asked."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _is_transient(exc: BaseException) -> bool:
    """Worth retrying: timeouts, connection errors, 429, 5xx and spoiled replies (not other
    4xx, nor a refused ``response_format``: asking again in the same format cannot help)."""
    if isinstance(exc, (openai.APIConnectionError, _ServerFault)):  # includes APITimeoutError
        return True
    if capabilities.is_format_rejection(exc):
        return False
    return isinstance(exc, openai.APIStatusError) and (exc.status_code == 429 or exc.status_code >= 500)


def _retry_after_s(exc: BaseException | None) -> float | None:
    """Seconds the server asked to wait (``retry-after-ms``, or ``Retry-After`` as
    seconds or an HTTP date), capped at ``MAX_RETRY_AFTER_S``; None if it did not ask."""
    if not isinstance(exc, openai.APIStatusError):
        return None
    headers = exc.response.headers
    seconds: float | None = None
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            seconds = float(ms) / 1000
        except ValueError:
            pass
    if seconds is None and (value := headers.get("retry-after")) is not None:
        try:
            seconds = float(value)
        except ValueError:
            try:
                seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
            except (TypeError, ValueError):
                return None
    return None if seconds is None else min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


@functools.lru_cache(maxsize=256)
def _validator(schema_json: str) -> Draft202012Validator:
    """A checked validator per schema: checking a schema costs more than a request."""
    schema = json.loads(schema_json)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _parse(text: str | None, validator: Draft202012Validator) -> tuple[dict[str, Any] | None, bool, str]:
    """(data, repaired, error) of one reply; ``error`` is empty when ``data`` is usable."""
    if text is None:
        return None, False, "the server returned no choices"
    fenced = _FENCE_RE.search(text)
    body = fenced.group(1) if fenced else text.strip()
    repaired = False
    try:
        # strict=False takes raw control characters (a newline) inside strings, which
        # llama.cpp's JSON grammar lets through: the value is unambiguous, nothing to repair
        data = json.loads(body, strict=False)
    except json.JSONDecodeError as exc:
        log.info("repairing malformed JSON (%s): %s", exc, scrub(body[-200:]))
        data, repaired = json_repair.loads(body), True
    if not isinstance(data, dict):
        return None, repaired, "the reply is not a JSON object"
    if (bound := best_match(validator.iter_errors(data))) is not None and capabilities.clamp_to_bounds(data, validator):
        log.info("clamped a value past its bound: %s", bound.message[:200])
        repaired = True  # a grammar let a number or an array past its bound
    if (error := best_match(validator.iter_errors(data))) is not None:
        where = "/".join(map(str, error.absolute_path)) or "the top level"
        return None, repaired, f"schema violation at {where}: {error.message[:200]}"
    return data, repaired, ""


class LLMClient:
    """Async Chat Completions client with retries, JSON repair, caching and accounting.

    Use one client for a whole run so that ``max_concurrency`` bounds every request the
    run sends. It works from any event loop (``run_sync`` included): the underlying HTTP
    client is rebuilt when the loop changes, and closed by ``aclose()`` (``async with``)
    or when ``asyncio.run`` ends its loop.
    """

    def __init__(self, config: LLMConfig | None = None) -> None:
        self.config = config or LLMConfig()
        cfg = self.config
        register_secret_env(cfg.api_key_env)  # its value is scrubbed from every error and log
        # the embedded server (base_url None: llm=local starts it on 127.0.0.1) needs no key
        if not os.environ.get(cfg.api_key_env) and cfg.base_url is not None and not _is_local(cfg.base_url):
            log.warning(
                "$%s is not set: %s will get the dummy key %r (set the variable named by llm.api_key_env "
                "if the server needs a key)", cfg.api_key_env, cfg.base_url, DUMMY_API_KEY,
            )
        self._cache = ResponseCache(cfg.cache_dir) if cfg.cache_dir and cfg.cache_mode != "off" else None
        self._run_usage = UsageStats()
        self._tag_usage: dict[str, UsageStats] = {}
        self._role_usage: dict[str, UsageStats] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._openai: openai.AsyncOpenAI | None = None
        self._limiter: PriorityLimiter | None = None
        self._closer: asyncio.Task[None] | None = None
        self.formats = FormatNegotiator(cfg.structured_outputs)
        """The structured-output mode in use and how it was found (``formats.report()``)."""
        self._format_stored = False
        self.tokens = TokenCounter(_api_root(cfg.base_url) if cfg.base_url else None, cfg.model)  # embedded: set on first use
        """Prompt token counts of this server (its tokenizer endpoint, else an estimate)."""
        self.concurrency = AdaptiveConcurrency(cfg.max_concurrency) if cfg.adaptive_concurrency else None
        """Requests in flight sized to the server (``concurrency.report()``); None: fixed."""
        if self._cache is not None and (stored := self._cache.get(self._formats_key())) is not None:
            self.formats.restore(stored.get("mode", ""))  # a replay needs the requests it cached
            self._format_stored = True
        if not cfg.base_url and cfg.local is not None:
            # the embedded server is llama-cpp-python's, which takes this mode: no rejected
            # first request and no probe before the first call
            self.formats.restore("json_object_schema", "known: the embedded server (llama-cpp-python) enforces it")

    def __repr__(self) -> str:
        return f"LLMClient(base_url={self.config.base_url or 'local'!r}, model={self.config.model!r})"

    def _server_url(self) -> str:
        """``config.base_url``, or the URL of the embedded server (started on first use)."""
        if self.config.base_url:
            return self.config.base_url
        from rescue_env.llm.local_server import shared_server

        assert self.config.local is not None  # LLMConfig checks it
        return shared_server(self.config.local, self.config.model).base_url

    def start_server(self) -> None:
        """Launch the embedded server (``llm=local`` without ``llm.base_url``) in the background
        now, so that it is loading while the caller prepares its work; the first request waits
        until it answers, and raises its error if it could not start. Nothing for a given URL."""
        if not self.config.base_url and self.config.local is not None:
            from rescue_env.llm.local_server import launch_in_background

            launch_in_background(self.config.local, self.config.model)

    @functools.cached_property
    def _server_identity(self) -> str:
        """What names the server in cache keys: its URL, or the embedded model's file (whose
        port changes from run to run)."""
        if self.config.base_url:
            return self.config.base_url.rstrip("/")
        from rescue_env.llm.local_server import model_path

        assert self.config.local is not None
        return f"local:{model_path(self.config.local).name}"

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP connections now (the client stays usable and reconnects)."""
        if self._closer is not None and self._loop is asyncio.get_running_loop():
            self._closer.cancel()
            await asyncio.wait([self._closer])
        self._openai = self._limiter = self._loop = self._closer = None

    def usage(self, tag: str | None = None) -> UsageStats:
        """Live totals of the whole run, or of the calls made with ``tag`` (empty if none)."""
        return self._run_usage if tag is None else self._tag_usage.setdefault(tag, UsageStats())

    def usage_by_role(self) -> dict[str, UsageStats]:
        """Live totals per schema ``name`` of ``complete_json`` (``text`` for ``complete_text``):
        tokens and how often each role's replies were valid first time, repaired, re-asked, failed."""
        return dict(self._role_usage)

    async def complete_json(
        self,
        messages: Messages | Prompt,
        schema: dict[str, Any],
        *,
        name: str,
        seed: int | None = None,
        tag: str | None = None,
    ) -> LLMResult:
        """Ask for a JSON object valid for ``schema``; never raises for model/server faults.

        Args:
            messages: Chat Completions messages (``{"role": ..., "content": ...}``), or a
                :class:`~rescue_env.llm.tokens.Prompt` whose transcript window is shortened
                to fit the model's context (:meth:`fit_prompt`).
            schema: JSON Schema of the reply; its root must be an object. For OpenAI's
                strict mode list every property in ``required`` and set
                ``additionalProperties: false``.
            name: schema name sent to the server (letters, digits, ``_``, ``-``; ≤ 64).
            seed: sampling seed of this call (default ``config.seed``).
            tag: also account this call under ``usage(tag)`` (e.g. an episode id).
        """
        if not _NAME_RE.match(name):
            raise ValueError(f"schema name {name!r} must be 1-64 letters, digits, '_' or '-'")
        if schema.get("type") != "object":
            raise ValueError("the schema's root must be {'type': 'object', ...}: structured outputs need an object")
        schema_key = json.dumps(schema, sort_keys=True)
        validator = _validator(schema_key)
        request: dict[str, Any] = {}
        bounded = _reply_budget(schema_key)
        prompt = messages if isinstance(messages, Prompt) else None
        trimmed = False

        async def send(mode: str) -> _Reply:
            nonlocal request, trimmed
            with_schema = capabilities.schema_in_prompt(mode)
            # a grammar ends every string at its bound; without one a model may write longer
            budget = min(self.config.max_tokens, bounded if mode == "json_object_schema" else 2 * bounded)

            def build(window: int) -> Messages:
                shown = prompt.messages(window) if prompt is not None else messages
                return _with_schema_prompt(shown, schema) if with_schema else shown  # type: ignore[arg-type]

            if prompt is not None:
                shown, trimmed = await self.fit_prompt(prompt, budget, build)
            else:
                shown = build(0)
            request = self._request(shown, seed, capabilities.response_format(mode, name, schema), max_tokens=budget)
            return await self._send(request, name, usable)

        def usable(text: str) -> bool:
            return not _parse(text, validator)[2]

        start = time.perf_counter()
        replies: list[_Reply] = []
        data, repaired, reasked, error, retries = None, False, False, "", 0
        try:
            async with asyncio.timeout(self.config.call_timeout_s):
                replies.append(await self.formats.call(send, self._probe))
                self._remember_format()
                data, repaired, error = _parse(replies[-1].text, validator)
                if error and self.config.reasks:
                    reasked = True
                    data, repaired, error = await self._reask(request, replies, error, name, usable, validator)
        except _CallFailed as exc:
            error, retries = exc.reason, exc.retries
        except FormatRejected as exc:
            error = f"{exc} (llm.structured_outputs={self.formats.setting}; 'auto' finds what the server takes)"
        except TimeoutError:
            data, error = None, self._deadline_error()
        except PromptTooLong as exc:
            error = str(exc)
        return self._finish(
            name, tag, start, replies,
            data=data, error=error, repaired=repaired, reasked=reasked, failed_retries=retries, trimmed=trimmed,
        )

    async def _reask(
        self, request: dict[str, Any], replies: list[_Reply], error: str, name: str, usable: Any, validator: Any
    ) -> tuple[Any, bool, str]:
        """Ask again, up to ``llm.reasks`` times, after an answer that fails the schema (the
        model's fault: server faults are retried in :meth:`_send`, not here). Appends each
        reply to ``replies``; returns the last one's (data, repaired, error)."""
        data, repaired = None, False
        for _ in range(self.config.reasks):
            log.info("re-asking %s: %s", name, error)
            retry_messages = [
                *request["messages"],
                {"role": "assistant", "content": replies[-1].text or ""},
                {"role": "user", "content": _REASK.format(error=error)},
            ]
            replies.append(await self._send({**request, "messages": retry_messages}, name, usable))
            data, repaired, error = _parse(replies[-1].text, validator)
            if not error:
                break
        return data, repaired, error

    async def _post(self, url: str, body: dict[str, Any]) -> Any:
        """POST ``body`` to ``url`` over this client's connection (the tokenizer endpoints)."""
        client, _ = self._bind_loop()
        return await client.post(url, body=body, cast_to=object, options={"timeout": 10.0})

    def context_tokens(self) -> int | None:
        """The model's context size in tokens: ``llm.context_tokens``, else the embedded
        server's ``n_ctx``, else what the server's tokenizer reported (vLLM); None: unknown
        (prompts are then sent whole)."""
        cfg = self.config
        if cfg.context_tokens is not None:
            return cfg.context_tokens
        if not cfg.base_url and cfg.local is not None:
            return cfg.local.n_ctx
        return self.tokens.context_tokens

    async def fit_prompt(self, prompt: Prompt, reply_tokens: int, build: Any = None) -> tuple[Messages, bool]:
        """``prompt``'s messages with the widest transcript window whose tokens plus
        ``reply_tokens`` fit :meth:`context_tokens`, and whether lines were left out.
        ``build(window)`` defaults to ``prompt.messages``. Raises :class:`PromptTooLong` when
        even ``prompt.min_window`` lines do not fit."""
        build = build or prompt.messages
        full = build(prompt.window)
        if self.tokens.root is None:
            self.tokens.root = _api_root(self._server_url())
        limit = self.context_tokens()
        if limit is None and self.tokens.endpoint is None and self.config.base_url:
            await self.tokens.count(full, self._post)  # a first count may learn the context size (vLLM)
            limit = self.context_tokens()
        if limit is None:
            return full, False
        room = limit - reply_tokens
        # the estimate errs long: when it fits with a margin, no count is needed
        if self.tokens.estimate(full) <= 0.8 * room or await self.tokens.count(full, self._post) <= room:
            return full, False
        low, high = prompt.min_window, prompt.window - 1  # widest window that fits, by bisection
        if await self.tokens.count(build(low), self._post) > room:
            raise PromptTooLong(
                f"the prompt does not fit the model's context of {limit} tokens even with {low} transcript "
                f"line(s) and a {reply_tokens}-token reply (raise llm.context_tokens or the server's context)"
            )
        while low < high:
            mid = (low + high + 1) // 2
            if await self.tokens.count(build(mid), self._post) <= room:
                low = mid
            else:
                high = mid - 1
        log.debug("prompt trimmed to %d of %d transcript lines to fit %d tokens", low, prompt.window, limit)
        return build(low), True

    async def complete_text(
        self, messages: list[dict[str, Any]], *, seed: int | None = None, tag: str | None = None
    ) -> LLMResult:
        """Ask for free text (``raw_text``); ``ok=False`` with the reason on failure."""
        request = self._request(messages, seed, response_format=None)
        start = time.perf_counter()
        replies: list[_Reply] = []
        error, retries = "", 0
        try:
            async with asyncio.timeout(self.config.call_timeout_s):
                replies.append(await self._send(request))
            if replies[-1].text is None:
                error = "the server returned no choices"
        except _CallFailed as exc:
            error, retries = exc.reason, exc.retries
        except TimeoutError:
            error = self._deadline_error()
        return self._finish("text", tag, start, replies, error=error, failed_retries=retries)

    def _deadline_error(self) -> str:
        cfg = self.config
        return f"no usable reply within llm.call_timeout_s={cfg.call_timeout_s:g}s (retries and backoff included; one request may take llm.timeout_s={cfg.timeout_s:g}s)"

    def _request(
        self,
        messages: list[dict[str, Any]],
        seed: int | None,
        response_format: dict[str, Any] | None,
        *,
        max_tokens: int | None = None,
    ) -> dict[str, Any]:
        """The Chat Completions request body: everything the server sees but headers."""
        cfg = self.config
        request: dict[str, Any] = {
            "model": cfg.model,
            "messages": messages,
            "temperature": cfg.temperature,
            "max_tokens": cfg.max_tokens if max_tokens is None else max_tokens,
        }
        if (seed := cfg.seed if seed is None else seed) is not None:
            request["seed"] = seed
        if response_format is not None:
            request["response_format"] = response_format
        return {**request, **cfg.extra_body}

    async def _probe(self, mode: str) -> bool:
        """Whether the server enforces a schema sent in ``mode`` (one tiny request)."""
        request = self._request(
            capabilities.PROBE_MESSAGES, None, capabilities.response_format(mode, "probe", capabilities.PROBE_SCHEMA)
        )
        request["max_tokens"] = 16
        try:
            reply = await self._send(request)
        except _CallFailed as exc:
            raise FormatRejected(exc.reason) from None
        return capabilities.probe_enforced(reply.text)

    def _formats_key(self) -> str:
        return self.cache_key({"structured_outputs": "negotiated mode", "model": self.config.model})

    def _remember_format(self) -> None:
        """Store a negotiated mode beside the cached replies, so a replay sends the same requests."""
        if self._format_stored or self.formats.setting != "auto" or self.formats.mode is None:
            return
        if self._cache is not None and self.config.cache_mode == "readwrite":
            self._cache.put(self._formats_key(), {"mode": self.formats.mode})
        self._format_stored = True

    def cache_key(self, request: dict[str, Any]) -> str:
        """Fingerprint of a request body sent to the server (``config.base_url`` or the local model)."""
        return fingerprint({"base_url": self._server_identity, **request})

    def _bind_loop(self) -> tuple[openai.AsyncOpenAI, PriorityLimiter]:
        """The HTTP client and request limiter of the running loop (they cannot cross loops)."""
        loop = asyncio.get_running_loop()
        if self._openai is None or self._limiter is None or loop is not self._loop:
            cfg = self.config
            self._openai = openai.AsyncOpenAI(
                base_url=self._server_url(),
                api_key=os.environ.get(cfg.api_key_env) or DUMMY_API_KEY,
                max_retries=0,  # tenacity below is the one retry mechanism
                timeout=cfg.timeout_s,
                http_client=_http_client(),
            )
            # at most max_concurrency requests in flight; waiting ones go by request_priority
            self._limiter = self.concurrency.limiter() if self.concurrency else PriorityLimiter(cfg.max_concurrency)
            self._loop = loop
            # asyncio.run cancels pending tasks before it closes its loop; this one then
            # closes the loop's connections, so run_sync-style use leaves no socket open.
            self._closer = loop.create_task(_close_when_cancelled(self._openai))
        return self._openai, self._limiter

    def _wait_s(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        after = _retry_after_s(exc)
        if after is not None:
            return after
        backoff = wait_random_exponential(multiplier=self.config.backoff_initial_s, max=self.config.backoff_max_s)
        return backoff(state)

    async def _send(self, request: dict[str, Any], kind: str = "", usable: Callable[[str], bool] | None = None) -> _Reply:
        """One reply for ``request``, from the cache or the server; raises ``_CallFailed``.

        A reply without a choice, and one cut at ``max_tokens`` that ``usable`` rejects, are
        the server's faults: retried with backoff within ``max_retries``."""
        cache = self._cache
        key = self.cache_key(request) if cache is not None else ""
        if cache is not None and (hit := cache.get(key)) is not None:
            return _Reply(hit["text"], Usage(**hit["usage"]), cached=True, retries=0)
        client, limiter = self._bind_loop()
        retries = 0
        try:
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(self.config.max_retries + 1),
                wait=self._wait_s,
                retry=retry_if_exception(_is_transient),
                before_sleep=_log_retry,
                reraise=True,
            ):
                with attempt:
                    retries = attempt.retry_state.attempt_number - 1
                    # held per attempt, not across backoff sleeps; a retry queues first
                    async with limiter.slot(RETRY_PRIORITY if retries else None):
                        # post() is the SDK's raw route: it skips create()'s per-call walk of
                        # the params against their TypedDicts (~1.4 ms of CPU a request), and
                        # cast_to=object returns the parsed JSON body without building the
                        # ChatCompletion model tree (~0.4 ms): at high concurrency the event
                        # loop's CPU, not the server, sets the pace. We read three fields.
                        sent_at = time.perf_counter()  # latency counts from here, not from the queue
                        try:
                            body = await client.post("/chat/completions", body=request, cast_to=object)
                        except openai.APIError as exc:
                            if self.concurrency:
                                self.concurrency.on_error(exc, sent_at)
                            raise
                        except json.JSONDecodeError:  # a JSON-labelled body cut short: the SDK's parse fails
                            raise _ServerFault("the server's reply was cut mid-JSON") from None
                        if self.concurrency:
                            self.concurrency.on_reply(kind, sent_at, time.perf_counter() - sent_at)
                        _check_spoiled(body, request, usable)
        except _ServerFault as exc:
            raise _CallFailed(f"{exc.reason} (after {retries} retries)", retries) from None
        except openai.APIError as exc:
            if capabilities.is_format_rejection(exc):
                fmt = (request.get("response_format") or {}).get("type")
                raise FormatRejected(f"the server rejects response_format {fmt!r}: {scrub(exc.message)}") from None
            cfg = self.config
            reason = describe_failure(exc, base_url=self._server_url(), api_key_env=cfg.api_key_env, timeout_s=cfg.timeout_s)
            raise _CallFailed(f"{reason} (after {retries} retries)", retries) from None
        if (problem := describe_body(body)) is not None:
            raise _CallFailed(problem, retries)
        text, usage = _completion_fields(body)
        self.tokens.observe(request.get("messages") or [], usage.prompt_tokens)
        if text is not None:
            text = scrub(text)  # a reply that echoes a key must not reach the transcript
        if text is None:
            return _Reply(None, usage, cached=False, retries=retries)
        if cache is not None and self.config.cache_mode == "readwrite":
            cache.put(key, {"text": text, "usage": asdict(usage)})
        return _Reply(text, usage, cached=False, retries=retries)

    def _finish(
        self,
        name: str,
        tag: str | None,
        start: float,
        replies: list[_Reply],
        *,
        data: dict[str, Any] | None = None,
        error: str = "",
        repaired: bool = False,
        reasked: bool = False,
        failed_retries: int = 0,
        trimmed: bool = False,
    ) -> LLMResult:
        """Build the result and account it (run-wide and under ``tag``)."""
        result = LLMResult(
            data=data,
            ok=not error,
            error=error,
            raw_text=(replies[-1].text or "") if replies else "",
            repaired=repaired and not error,
            reasked=reasked,
            cached=bool(replies) and all(r.cached for r in replies),
            usage=sum((r.usage for r in replies), Usage()),
            latency_s=time.perf_counter() - start,
            retries=failed_retries + sum(r.retries for r in replies),
        )
        billed = sum((r.usage for r in replies if not r.cached), Usage())
        price_in, price_out = self.config.price_per_1k_input, self.config.price_per_1k_output
        cost = None
        if price_in is not None and price_out is not None:
            cost = (billed.prompt_tokens * price_in + billed.completion_tokens * price_out) / 1000
        role = self._role_usage.setdefault(name, UsageStats())
        for stats in [self._run_usage, role] + ([self.usage(tag)] if tag is not None else []):
            stats.record(
                ok=result.ok,
                cached=result.cached,
                retries=result.retries,
                repaired=result.repaired,
                reasked=reasked,
                billed=billed,
                latency_s=result.latency_s,
                cost=cost,
                trimmed=trimmed,
            )
        if error:
            log.warning("%s failed (tag=%s): %s", name, tag, error)
        else:
            log.debug(
                "%s ok in %.3fs (tag=%s, retries=%d, cached=%s)",
                name, result.latency_s, tag, result.retries, result.cached,
            )
        return result


def _is_local(base_url: str) -> bool:
    """The server runs on this machine (vLLM, Ollama): it usually needs no key."""
    from urllib.parse import urlsplit

    host = (urlsplit(base_url).hostname or "").lower()
    return host in ("localhost", "::1") or host.startswith("127.")


def _check_spoiled(body: Any, request: dict[str, Any], usable: Callable[[str], bool] | None) -> None:
    """Raise :class:`_ServerFault` for a JSON reply the server spoiled: no choice (an empty
    ``choices``, a body cut mid-JSON), or a reply cut at ``max_tokens`` that ``usable``
    rejects (a resample is the remedy, as for a 5xx; a re-ask would only lengthen the prompt)."""
    if describe_body(body) is not None:
        return  # not a Chat Completions body at all (an HTML page): _send names it, unretried
    text, _ = _completion_fields(body)
    if text is None:
        raise _ServerFault("the server returned no choices" if _json_body(body) is not None else "the server's reply was cut mid-JSON")
    if usable is not None and _finish_reason(body) == "length" and not usable(text):
        raise _ServerFault(f"the reply was cut at max_tokens={request.get('max_tokens')} before it was usable (finish_reason 'length')")


def _json_body(body: Any) -> dict[str, Any] | None:
    """The response body as a dict (a JSON text the server did not label is parsed); None if it is not one."""
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except json.JSONDecodeError:
            return None
    return body if isinstance(body, dict) else None


def _finish_reason(body: Any) -> str | None:
    """The first choice's ``finish_reason`` (None when absent)."""
    choices = (_json_body(body) or {}).get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    return first.get("finish_reason") if isinstance(first, dict) else None


def _completion_fields(body: Any) -> tuple[str | None, Usage]:
    """The first choice's text (``None`` when the body has no choice) and the token usage of
    a Chat Completions response body; servers differ in what they omit, so nothing is assumed."""
    body = _json_body(body)  # a JSON body the server did not label application/json is text
    if body is None:
        return None, Usage()
    usage = Usage.from_body(body)
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        return None, usage
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    return (content if isinstance(content, str) else ""), usage


def _with_schema_prompt(messages: list[dict[str, Any]], schema: dict[str, Any]) -> list[dict[str, Any]]:
    """Messages that state the schema at the end of the last message (for ``json_object``
    mode): what comes before stays the same for every role, so a server's cache shares it."""
    instruction = f"Reply with one JSON object that matches this JSON Schema:\n{json.dumps(schema)}"
    if messages:
        last = messages[-1]
        return [*messages[:-1], {**last, "content": f"{last.get('content') or ''}\n\n{instruction}"}]
    return [{"role": "user", "content": instruction}]


def _http_client() -> openai.DefaultAioHttpClient | None:
    """The SDK's aiohttp transport where ``openai[aiohttp]`` is installed (the SDK's advice
    for high concurrency: about a third less CPU per request), else None (its default)."""
    try:
        return openai.DefaultAioHttpClient()
    except (AttributeError, RuntimeError):  # an SDK without it, or without the extra
        return None


async def _close_when_cancelled(client: openai.AsyncOpenAI) -> None:
    try:
        await asyncio.get_running_loop().create_future()  # never resolves
    finally:
        await client.close()


def _log_retry(state: RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome else None
    wait = state.next_action.sleep if state.next_action else 0.0
    log.info("retry %d in %.2fs after %s", state.attempt_number, wait, type(exc).__name__)


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from code without an event loop (scripts, notebooks
    without a running loop). Inside a running loop, ``await`` it instead."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise RuntimeError("run_sync() was called inside a running event loop; await the coroutine instead")
