"""Prompts that fit the model: token counts, the context window and per-role reply budgets.

A call's prompt holds a transcript that grows with the episode; a small model's context
(SmolLM2: 8192 tokens, llama-cpp-python's default 2048) runs out long before a strong
model's. :class:`Prompt` is a prompt whose transcript window can shrink: the client asks
:class:`TokenCounter` for its size and, when it does not fit the context minus the reply
budget, shows fewer of the oldest lines (never fewer than ``min_window``).

Token counts come from the server's tokenizer when it has one, found on first use:

- vLLM: ``POST {root}/tokenize`` with the chat messages (its reply also gives
  ``max_model_len``, the context size);
- llama-cpp-python's server: ``POST {root}/extras/tokenize/count`` with the text (the chat
  template's few tokens per message are added);

otherwise an estimate from characters, whose characters-per-token ratio is learnt from the
``prompt_tokens`` the server reports for the prompts it was sent (:meth:`TokenCounter.observe`).

:func:`reply_budget` sizes ``max_tokens`` to a reply schema: the longest JSON the schema
allows under the grammar's string bounds (:func:`rescue_env.llm.capabilities.grammar_schema`),
so a client turn asks for ~300 tokens rather than the config's cap, and a model that rambles
in ``json_object`` mode is cut off sooner.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("rescue_env.llm")

Messages = list[dict[str, Any]]
#: ``post(url, body)``: the server's JSON reply to a POST of ``body`` to ``url``; raises on an
#: HTTP error (the client passes its own connection, so headers and the key travel as usual).
Post = Callable[[str, dict[str, Any]], Awaitable[Any]]

#: Tokens a chat template adds per message (role markers, separators) on top of its content.
TEMPLATE_TOKENS_PER_MESSAGE = 6
#: Characters per token assumed before the server has reported any usage: low, so that the
#: first estimates err on the long side (English prose runs ~4 characters per token).
INITIAL_CHARS_PER_TOKEN = 3.0
#: Characters per token of a JSON reply (keys, quotes and digits tokenise densely).
REPLY_CHARS_PER_TOKEN = 3.0
#: Tokens of a reply beyond its strings and keys (braces, spacing, a closing token).
REPLY_SLACK_TOKENS = 24


@dataclass(frozen=True)
class Prompt:
    """Chat messages with a transcript window the client may shrink to fit the context.

    ``build(window)`` returns the messages showing the last ``window`` transcript lines;
    ``window`` is the most the caller wants shown and ``min_window`` the fewest that still
    make sense (the call fails with a clear reason when even those do not fit).
    """

    build: Callable[[int], Messages]
    window: int
    min_window: int = 1

    def messages(self, window: int | None = None) -> Messages:
        return self.build(self.window if window is None else window)


def message_chars(messages: Messages) -> int:
    """Characters of the messages' contents (what a tokenizer sees, less the template)."""
    return sum(len(m.get("content") or "") for m in messages)


class TokenCounter:
    """Prompt token counts for one server: its tokenizer endpoint, else a learnt estimate.

    Args:
        root: the server's root URL (``base_url`` without ``/v1``), or None for estimates only.
        model: the model name sent to the tokenizer endpoint.
    """

    def __init__(self, root: str | None, model: str) -> None:
        self.root = root.rstrip("/") if root else None
        self.model = model
        self.endpoint: str | None = None
        """``vllm``, ``llama_cpp`` or ``estimate`` once found; None before the first count."""
        self.context_tokens: int | None = None
        """The context size the server reported (vLLM's ``max_model_len``), if any."""
        self._sent_chars = 0
        self._reported_tokens = 0

    # the estimate ---------------------------------------------------------------------------
    @property
    def chars_per_token(self) -> float:
        """Characters per prompt token, from the server's reported usage once there is some."""
        if self._reported_tokens < 200:  # too little seen to trust
            return INITIAL_CHARS_PER_TOKEN
        return self._sent_chars / self._reported_tokens

    def observe(self, messages: Messages, prompt_tokens: int) -> None:
        """Learn from a reply's reported ``prompt_tokens`` for the messages that were sent."""
        if prompt_tokens > 0:
            template = TEMPLATE_TOKENS_PER_MESSAGE * len(messages)
            self._sent_chars += message_chars(messages)
            self._reported_tokens += max(1, prompt_tokens - template)

    def estimate(self, messages: Messages) -> int:
        """Prompt tokens of ``messages`` estimated from their characters."""
        return math.ceil(message_chars(messages) / self.chars_per_token) + TEMPLATE_TOKENS_PER_MESSAGE * len(messages)

    # the server's tokenizer -------------------------------------------------------------------
    async def count(self, messages: Messages, post: Post | None = None) -> int:
        """Prompt tokens of ``messages``: the server's count when it has a tokenizer endpoint
        (asked through ``post``), else :meth:`estimate`. An endpoint that fails once is not
        asked again."""
        if self.root is None or post is None or self.endpoint == "estimate":
            return self.estimate(messages)
        for endpoint in [self.endpoint] if self.endpoint else ["vllm", "llama_cpp"]:
            try:
                n = await self._ask(post, endpoint, messages)
            except Exception as exc:  # noqa: BLE001 - any failure means: no usable endpoint
                log.debug("token count via %s failed: %s", endpoint, exc)
                continue
            if self.endpoint is None:
                log.info("prompt tokens are counted by the server's tokenizer (%s)", endpoint)
            self.endpoint = endpoint
            return n
        log.info("the server has no tokenizer endpoint: prompt tokens are estimated")
        self.endpoint = "estimate"
        return self.estimate(messages)

    async def _ask(self, post: Post, endpoint: str, messages: Messages) -> int:
        if endpoint == "vllm":
            body = await post(f"{self.root}/tokenize", {"model": self.model, "messages": messages})
            if isinstance(body.get("max_model_len"), int):
                self.context_tokens = body["max_model_len"]
            return int(body["count"])
        text = "\n".join(str(m.get("content") or "") for m in messages)
        body = await post(f"{self.root}/extras/tokenize/count", {"input": text, "model": self.model})
        return int(body["count"]) + TEMPLATE_TOKENS_PER_MESSAGE * len(messages)


def reply_budget(grammar_schema: dict[str, Any]) -> int:
    """Tokens the longest reply ``grammar_schema`` allows could take (strings at their
    ``maxLength``, arrays at ``maxItems``, keys and punctuation included), as ``max_tokens``
    for that reply. Unbounded strings count as 300 characters.

    Prose runs ~3 characters a token, but a string that runs away (a small model writing
    ``10:52:34.78968888…``) takes one token a character, since digits are tokens of their own:
    the budget leaves room for its longest string at one token a character, so the grammar's
    ``maxLength`` ends such a string and the JSON closes, rather than the budget cutting it."""
    longest = 0

    def chars(node: Any) -> int:
        if not isinstance(node, dict):
            return 8
        if "enum" in node:
            return max((len(json.dumps(v)) for v in node["enum"]), default=8)
        kind = node.get("type")
        if kind == "object":
            props = node.get("properties", {})
            return 2 + sum(len(k) + 4 + chars(v) for k, v in props.items())
        if kind == "array":
            return 2 + int(node.get("maxItems", 3)) * (chars(node.get("items", {})) + 2)
        if kind == "string":
            nonlocal longest
            longest = max(longest, int(node.get("maxLength", 300)))
            return int(node.get("maxLength", 300)) + 2
        return 8  # numbers, booleans

    total = chars(grammar_schema)
    runaway = longest - longest / REPLY_CHARS_PER_TOKEN  # its extra tokens at one a character
    return math.ceil((total / REPLY_CHARS_PER_TOKEN) + runaway) + REPLY_SLACK_TOKENS
