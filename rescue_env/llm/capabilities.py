"""Which structured-output mode a server accepts, found by asking it rather than by preset.

Servers differ in how they take a reply's JSON Schema (``LLMConfig.structured_outputs``):

- ``json_schema``: ``response_format={"type": "json_schema", "json_schema": {"strict": true,
  "schema": ...}}`` — OpenAI, vLLM, llama.cpp's C++ ``llama-server``, recent Ollama;
- ``json_object_schema``: ``{"type": "json_object", "schema": ...}`` — the extension of
  ``llama-cpp-python``'s server, which rejects ``json_schema`` (HTTP 500, "Input should be
  'text' or 'json_object'") but enforces this schema by grammar;
- ``json_object``: ``{"type": "json_object"}`` with the schema stated in the prompt — any
  JSON-mode server; the reply is only validated (and repaired or re-asked) client side.

With ``structured_outputs="auto"`` (the default) a :class:`FormatNegotiator` sends the first
call in the strongest mode and steps down when the server *rejects the format* (an HTTP error
whose message names ``response_format``/``json_schema``/``json_object``, see
:func:`is_format_rejection`); before it settles on ``json_object_schema`` it checks with one
tiny probe request that the server really enforces the schema (a server that ignores the
unknown ``schema`` key would otherwise leave the model unguided). Servers that accept
``json_schema`` pay nothing: their first call is a normal call. The chosen mode and every
step of the negotiation are kept (:meth:`FormatNegotiator.report`) and land in the run's
``metrics.json`` (``llm.structured_outputs``).

Grammars do not enforce every keyword (``llama-cpp-python`` let an integer ``maximum`` pass);
the client still validates each reply and :func:`clamp_to_bounds` repairs numbers and arrays
that only break a bound.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import openai

log = logging.getLogger("rescue_env.llm")

T = TypeVar("T")

#: Modes from strongest to weakest; ``auto`` negotiates among them.
MODES = ("json_schema", "json_object_schema", "json_object")
#: Values of ``LLMConfig.structured_outputs`` (``true``/``false`` are read as the first and last mode).
SETTINGS = ("auto", *MODES)

#: Longest free-text string asked of a grammar-constrained model (``json_object_schema``):
#: without it a small model can fill a string up to ``max_tokens``.
GRAMMAR_MAX_STRING_CHARS = 300
#: Tighter bounds for the free-text fields of the project's schemas, by property name: a
#: spoken turn is one to three sentences, an emotion or an attitude a few words. They also
#: size each role's reply budget (:func:`rescue_env.llm.tokens.reply_budget`).
GRAMMAR_STRING_CHARS = {"utterance": 280, "emotion": 40, "attitude": 48, "viewpoint": 120, "reason": 200}
#: Steps of the grid a bounded number is held to under a grammar (the converter does not
#: enforce ``minimum``/``maximum``: SmolLM2 wrote valence 10 for a -1..1 field).
GRAMMAR_NUMBER_STEPS = 20

_REJECTION_WORDS = ("response_format", "json_schema", "json_object")

PROBE_VALUE = "rescue-probe"
PROBE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"probe": {"type": "string", "enum": [PROBE_VALUE]}},
    "required": ["probe"],
    "additionalProperties": False,
}
PROBE_MESSAGES = [{"role": "user", "content": "Reply with a JSON object."}]


def normalise_setting(value: Any) -> str:
    """``LLMConfig.structured_outputs`` as one of ``SETTINGS``; booleans (also as the strings
    Hydra makes of them) keep their old meaning: true = ``json_schema``, false = ``json_object``."""
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return "json_schema"
    if text in ("false", "0", "no"):
        return "json_object"
    if text not in SETTINGS:
        raise ValueError(f"structured_outputs must be one of {SETTINGS} (or true/false), not {value!r}")
    return text


class FormatRejected(Exception):
    """The server refused a request's ``response_format`` (not worth retrying)."""


def is_format_rejection(exc: BaseException) -> bool:
    """True for an HTTP error that says the server does not take this ``response_format``.

    ``llama-cpp-python`` answers 500 ("Input should be 'text' or 'json_object'"), others 400
    or 422; a plain overload 500 does not name the format, so it stays a retryable error.
    """
    if not isinstance(exc, openai.APIStatusError) or exc.status_code not in (400, 404, 422, 500, 501):
        return False
    text = f"{exc.message} {exc.body!r}".lower()
    return any(word in text for word in _REJECTION_WORDS)


def response_format(mode: str, name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The ``response_format`` request field of ``mode`` for ``schema``."""
    if mode == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
    if mode == "json_object_schema":
        return {"type": "json_object", "schema": grammar_schema(schema)}
    if mode == "json_object":
        return {"type": "json_object"}
    raise ValueError(f"unknown structured-output mode {mode!r}; choose from {MODES}")


def schema_in_prompt(mode: str) -> bool:
    """Whether ``mode`` needs the schema stated in the prompt (the server does not see it)."""
    return mode == "json_object"


def grammar_schema(schema: dict[str, Any], max_chars: int = GRAMMAR_MAX_STRING_CHARS) -> dict[str, Any]:
    """A copy of ``schema`` shaped for llama-cpp-python's schema-to-grammar converter; the
    reply is still validated against ``schema`` itself.

    Free-text strings (no ``enum``/``maxLength``) get a ``maxLength``, so the grammar ends
    them (a small model otherwise fills a string up to ``max_tokens``). An ``enum`` beside a
    list of types (``{"type": ["integer", "null"], "enum": [0, 1, 2, None]}``) loses the
    ``type``: the converter follows the type list and drops the enum (SmolLM2 then answered
    9 for a 0-4 field); the enum alone is enforced. An integer with a small
    ``minimum``..``maximum`` range becomes the enum of its values, since the converter does not
    enforce the bounds (it let 23 through for 1-10); a number with both bounds becomes the
    enum of a grid of ``GRAMMAR_NUMBER_STEPS`` steps between them (valence -1, -0.9, …, 1).
    Strings named in ``GRAMMAR_STRING_CHARS`` get that bound instead of ``max_chars``.
    """
    out = copy.deepcopy(schema)

    def bounded(node: dict[str, Any], name: str | None) -> None:
        if "enum" in node and isinstance(node.get("type"), list):
            del node["type"]
        low, high = node.get("minimum"), node.get("maximum")
        kind = node.get("type")
        if kind == "integer" and isinstance(low, int) and isinstance(high, int) and 0 <= high - low <= 100:
            node.clear()
            node["enum"] = list(range(low, high + 1))
        elif kind == "number" and isinstance(low, (int, float)) and isinstance(high, (int, float)) and low < high:
            step = (high - low) / GRAMMAR_NUMBER_STEPS
            node.clear()
            node["enum"] = [round(low + i * step, 6) for i in range(GRAMMAR_NUMBER_STEPS + 1)]
        elif kind == "string" and "enum" not in node and "maxLength" not in node:
            node["maxLength"] = GRAMMAR_STRING_CHARS.get(name or "", max_chars)

    def walk(node: Any, name: str | None = None) -> None:
        if isinstance(node, dict):
            bounded(node, name)
            for key, value in node.items():
                if key == "properties" and isinstance(value, dict):
                    for prop, sub in value.items():
                        walk(sub, prop)
                elif key == "items":
                    walk(value, name)
                else:
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(out)
    return out


def clamp_to_bounds(data: dict[str, Any], validator: Any) -> bool:
    """Repair, in place, values that break only a bound: numbers beyond ``minimum``/``maximum``
    are set to the bound (integers stay integers), arrays beyond ``maxItems`` are cut.
    Returns True when anything changed. Other violations are left for the caller."""
    changed = False
    for error in sorted(validator.iter_errors(data), key=lambda e: len(e.absolute_path), reverse=True):
        if error.validator not in ("minimum", "maximum", "maxItems") or not error.absolute_path:
            continue
        *parents, key = list(error.absolute_path)
        holder: Any = data
        try:
            for part in parents:
                holder = holder[part]
            value = holder[key]
        except (KeyError, IndexError, TypeError):
            continue
        if error.validator == "maxItems" and isinstance(value, list):
            holder[key] = value[: error.validator_value]
            changed = True
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            bound = error.validator_value
            holder[key] = int(bound) if isinstance(value, int) and float(bound).is_integer() else bound
            changed = True
    return changed


@dataclass
class FormatNegotiator:
    """Holds the structured-output mode of one client and finds it on the first call.

    ``setting`` is the normalised ``LLMConfig.structured_outputs``; a fixed mode is used as
    given (a rejection then fails the call with the server's message). Under ``auto`` the
    first caller tries the modes in order while the others wait for its answer.
    """

    setting: str = "auto"
    mode: str | None = None
    trials: list[dict[str, str]] = field(default_factory=list)
    """Each mode tried and what happened (``accepted``, ``rejected: ...``, ``not enforced``)."""
    _lock: asyncio.Lock | None = None
    _lock_loop: asyncio.AbstractEventLoop | None = None

    def __post_init__(self) -> None:
        self.setting = normalise_setting(self.setting)
        if self.setting != "auto":
            self.mode = self.setting

    def report(self) -> dict[str, Any]:
        """The setting, the mode in use (None before the first call) and the negotiation."""
        return {"setting": self.setting, "mode": self.mode, "trials": list(self.trials)}

    def restore(self, mode: str, outcome: str = "restored from the cache") -> None:
        """Adopt a mode known without asking the server (found earlier and stored next to a
        replay cache, or the one the embedded server is known to take); ``outcome`` says how
        it is known. Only under ``auto`` before a mode is in use."""
        if self.setting == "auto" and self.mode is None and mode in MODES:
            self.mode = mode
            self.trials.append({"mode": mode, "outcome": outcome})

    def _loop_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        return self._lock

    async def call(
        self,
        send: Callable[[str], Awaitable[T]],
        probe: Callable[[str], Awaitable[bool]],
    ) -> T:
        """``send(mode)`` in the mode in use, negotiating it first when unknown.

        ``send`` raises :class:`FormatRejected` when the server refuses the format; ``probe(mode)``
        returns whether the server enforces a schema sent in ``mode``. While the mode is unknown
        every caller tries the strongest one at once (a server that takes it loses no
        concurrency); the first one refused steps down the list while the others wait for it.
        """
        if self.mode is not None:
            return await send(self.mode)
        try:
            result = await send(MODES[0])
        except FormatRejected as exc:
            refused = exc
        else:
            if self.mode is None:
                self.mode = MODES[0]
                self._note(MODES[0], "accepted")
            return result
        async with self._loop_lock():
            if self.mode is None:
                self._note(MODES[0], f"rejected: {refused}")
                return await self._negotiate(send, probe, MODES[1:])
            mode = self.mode
        return await send(mode)

    async def _negotiate(
        self, send: Callable[[str], Awaitable[T]], probe: Callable[[str], Awaitable[bool]], modes: tuple[str, ...]
    ) -> T:
        last: FormatRejected | None = None
        for mode in modes:
            if mode == "json_object_schema":
                try:
                    enforced = await probe(mode)
                except FormatRejected as exc:
                    self._note(mode, f"rejected: {exc}")
                    continue
                if not enforced:
                    self._note(mode, "accepted but not enforced (the probe reply ignored the schema)")
                    continue
            try:
                result = await send(mode)
            except FormatRejected as exc:
                last = exc
                self._note(mode, f"rejected: {exc}")
                continue
            self.mode = mode
            self._note(mode, "accepted")
            log.info("structured outputs: the server takes %s", mode)
            return result
        raise FormatRejected(f"the server accepts none of {MODES}; last: {last}")

    def _note(self, mode: str, outcome: str) -> None:
        self.trials.append({"mode": mode, "outcome": outcome[:300]})


def probe_enforced(text: str | None) -> bool:
    """Whether a probe reply followed :data:`PROBE_SCHEMA` (the server enforced it)."""
    try:
        data = json.loads(text or "")
    except json.JSONDecodeError:
        return False
    return isinstance(data, dict) and data.get("probe") == PROBE_VALUE and len(data) == 1
