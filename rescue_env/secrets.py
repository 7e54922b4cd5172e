"""The one secret scrubber: every text that came from a server or a config passes through
:func:`scrub` before it is logged, printed or written to a run folder.

Two nets, by value and by shape:

- **by value**: the values of the environment variables that hold secrets — those named by
  ``llm.api_key_env`` (the LLM client registers them with :func:`register_secret_env`) and
  any variable whose name says it holds a key (``*API_KEY*``, ``*TOKEN*``, ``*SECRET*``,
  ``*PASSWORD*``); found anywhere in the text, even without a recognisable shape;
- **by shape**: anything that looks like a bearer token or an API key (``Bearer …``,
  ``sk-…``, ``hf_…``, ``ghp_…``, ``AKIA…``, ``AIza…``, ``xox?-…``, ``gsk_…``), the value
  after ``api_key=`` / ``"authorization": …``, and the user name and password of a URL
  (``http://user:pass@host``).

Each is replaced by ``[redacted]``.
"""

from __future__ import annotations

import logging
import os
import re

REDACTED = "[redacted]"

#: Key shapes of the common providers (OpenAI and OpenAI-style ``sk-``, Hugging Face,
#: GitHub, AWS, Google, Slack, Groq).
_TOKEN_RE = re.compile(
    r"\bsk-[A-Za-z0-9_\-]{8,}"
    r"|\bhf_[A-Za-z0-9]{16,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{16,}"
    r"|\bAKIA[0-9A-Z]{16}\b"
    r"|\bAIza[0-9A-Za-z_\-]{30,}"
    r"|\bxox[abprs]-[A-Za-z0-9\-]{10,}"
    r"|\bgsk_[A-Za-z0-9]{16,}"
)
_BEARER_RE = re.compile(r"(\b(?:Bearer|Basic|Token)\s+)[A-Za-z0-9._~+/=\-]{4,}", re.IGNORECASE)
_ASSIGNED_RE = re.compile(
    r"""((?:api[_\-]?key|x-api-key|authorization|access[_\-]?token|secret)["']?\s*[:=]\s*["']?)"""
    r"""(?!\[redacted\])(?!Bearer\b|Basic\b|Token\b)([^\s"',;}<>]{8,})""",
    re.IGNORECASE,
)
#: The user-info part of a URL (``scheme://user:password@``): credentials in the address.
_URL_USERINFO_RE = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.\-]*://)[^/?#\s@]+@")
_SECRET_NAME_RE = re.compile(r"API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD", re.IGNORECASE)
#: Shortest value scrubbed by value (shorter ones would redact ordinary words).
_MIN_SECRET_LEN = 8

_registered_envs: set[str] = set()


def register_secret_env(name: str) -> None:
    """Scrub the value of environment variable ``name`` from now on (read at each call,
    so a key set later is covered too)."""
    if name:
        _registered_envs.add(name)


def secret_values() -> list[str]:
    """The secret values known now, longest first."""
    names = set(_registered_envs) | {n for n in os.environ if _SECRET_NAME_RE.search(n)}
    values = {os.environ.get(n, "") for n in names}
    return sorted((v for v in values if len(v) >= _MIN_SECRET_LEN), key=len, reverse=True)


def looks_like_key(value: str) -> bool:
    """True when ``value`` has the shape of an API key or a bearer token."""
    text = str(value).strip()
    return bool(_TOKEN_RE.search(text) or _BEARER_RE.match(text))


def has_url_credentials(value: str) -> bool:
    """True when ``value`` holds a URL with a user name or password in it (``http://user:pass@host``)."""
    return bool(_URL_USERINFO_RE.search(str(value)))


def scrub(text: str) -> str:
    """``text`` with every known secret value and key-shaped token replaced by ``[redacted]``."""
    if not text:
        return text
    text = str(text)
    for value in secret_values():
        if value in text:
            text = text.replace(value, REDACTED)
    text = _BEARER_RE.sub(lambda m: m.group(1) + REDACTED, text)
    text = _TOKEN_RE.sub(REDACTED, text)
    text = _URL_USERINFO_RE.sub(lambda m: m.group(1) + REDACTED + "@", text)
    return _ASSIGNED_RE.sub(lambda m: m.group(1) + REDACTED, text)


class ScrubFilter(logging.Filter):
    """A logging filter that scrubs each record's final message (and its traceback text)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: leave it to the handler's own error path
            return True
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = scrub(record.exc_text)
        return True


def install_log_scrubber(logger: logging.Logger | None = None) -> None:
    """Add a :class:`ScrubFilter` to every handler of ``logger`` (the root logger by
    default): handler filters see the records of every logger that propagates to it."""
    target = logger or logging.getLogger()
    for handler in target.handlers:
        if not any(isinstance(f, ScrubFilter) for f in handler.filters):
            handler.addFilter(ScrubFilter())


class ScrubbingStream:
    """A text stream that scrubs what is written to it before passing it on (for the
    console: tracebacks and prints that no log filter sees). Everything else is delegated."""

    def __init__(self, stream) -> None:  # noqa: ANN001 (any text stream)
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(scrub(text))
        return len(text)

    def writelines(self, lines) -> None:  # noqa: ANN001
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):  # noqa: ANN204 (flush, isatty, fileno, encoding…)
        return getattr(self._stream, name)
