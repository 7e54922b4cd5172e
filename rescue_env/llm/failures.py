"""Names for the ways an LLM call fails, as a user can act on them.

The OpenAI SDK folds most transport failures into ``APIConnectionError`` /
``APITimeoutError`` ("Connection error.", "Request timed out."): with the aiohttp transport
even a refused connection arrives as a timeout. :func:`describe_failure` walks the
exception's cause chain to say what happened — connection refused, DNS, TLS, a real
timeout, an HTTP status with a short excerpt of the body, a body that is not JSON — and
every text it returns has passed the secret scrubber (servers echo headers in errors).
"""

from __future__ import annotations

import re
import socket
import ssl
from typing import Any
from urllib.parse import urlsplit

import openai

from rescue_env.secrets import scrub

#: Characters of a server's body quoted in an error.
EXCERPT_CHARS = 160
_TAGS_RE = re.compile(r"<[^>]+>")
_SPACE_RE = re.compile(r"\s+")
_SDK_PREFIX_RE = re.compile(r"^Error code: \d+ - ")


def excerpt(body: Any, limit: int = EXCERPT_CHARS) -> str:
    """A one-line, scrubbed, shortened view of a server's body (HTML tags removed)."""
    if body is None:
        return ""
    text = body if isinstance(body, str) else repr(body)
    title = re.search(r"<title[^>]*>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
    if title:
        text = f"HTML page {title.group(1).strip()!r}"
    text = _SPACE_RE.sub(" ", _TAGS_RE.sub(" ", text)).strip()
    text = scrub(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        out.append(cur)
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return out


def _host(base_url: str) -> str:
    parts = urlsplit(base_url)
    return parts.netloc or base_url


def describe_failure(exc: BaseException, *, base_url: str, api_key_env: str, timeout_s: float) -> str:
    """What went wrong in one request, named for the user (scrubbed, one line)."""
    host = _host(base_url)
    if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
        # Servers may quote (part of) the key in this message: never pass it on.
        return f"HTTP {exc.status_code}: the server refused the key; check ${api_key_env}"
    if isinstance(exc, openai.APIStatusError):
        body = exc.body if exc.body is not None else getattr(exc.response, "text", "")
        message = _SDK_PREFIX_RE.sub("", exc.message)  # the SDK's "Error code: 500 - " repeats the status
        detail = excerpt(message if isinstance(body, (dict, list)) else body) or excerpt(message)
        if exc.status_code == 404:
            detail += f" (is llm.base_url={base_url} the API root, ending in /v1, and llm.model served there?)"
        return f"HTTP {exc.status_code}: {detail}"
    chain = _chain(exc)
    for cause in chain:
        name = type(cause).__name__
        if isinstance(cause, ConnectionRefusedError) or "ConnectionRefused" in name:
            return f"connection refused by {host}: is the server running? (llm.base_url={base_url})"
        if isinstance(cause, socket.gaierror) or "DNSError" in name:
            return f"cannot resolve the host of llm.base_url={base_url} (DNS: {scrub(str(cause))[:120]})"
        if isinstance(cause, ssl.SSLError) or "SSL" in name or "Certificate" in name:
            return f"TLS failed with {host}: {scrub(str(cause))[:160]} (http:// vs https:// in llm.base_url?)"
    for cause in chain:
        if isinstance(cause, (ConnectionResetError, BrokenPipeError)) or "Disconnected" in type(cause).__name__:
            return f"{host} closed the connection before replying"
    if isinstance(exc, openai.APITimeoutError):
        return f"no reply from {host} within llm.timeout_s={timeout_s:g}s"
    if isinstance(exc, openai.APIConnectionError):
        root = chain[-1]
        return f"cannot reach {host}: {type(root).__name__}: {scrub(str(root))[:160]}"
    return f"{type(exc).__name__}: {scrub(str(exc))[:200]}"


def describe_body(body: Any) -> str | None:
    """Why a 2xx response body is not a Chat Completions reply (None when it is a JSON
    object, or a JSON text the caller can parse)."""
    if isinstance(body, dict):
        return None
    if isinstance(body, str):
        stripped = body.lstrip()
        if stripped.startswith(("{", "[")):
            return None
        kind = "an HTML page" if stripped[:15].lower().startswith(("<!doctype", "<html")) or "<html" in stripped[:200].lower() else "not JSON"
        return f"the server's reply is {kind}: {excerpt(body)} (is llm.base_url the API root, ending in /v1?)"
    return f"the server's reply is not a JSON object ({type(body).__name__})"
