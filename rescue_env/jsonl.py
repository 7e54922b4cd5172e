"""The one reader and writer of JSON Lines files (datasets, ``episodes.jsonl``, details and
judgement files).

Lines end at ``"\\n"`` only. ``str.splitlines`` (and anything built on it) also ends a line
at U+2028, U+2029, U+0085 and a few control characters, which JSON allows raw inside a
string: an LLM reply holding U+2028 would cut its episode's line in two, and every line
number after it would be wrong. Splitting on ``"\\n"`` accepts the whole of JSON; a
``"\\r"`` before it is JSON whitespace and needs no special case.

Writing goes through :func:`dumps`: ``NaN`` and ``Infinity`` are not JSON, so a non-finite
number is refused (a bug upstream) instead of being written where no JSON reader can read it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class JsonlError(ValueError):
    """A line of a JSON Lines file is not JSON; ``str()`` is ``FILE:LINE: what is wrong``."""

    def __init__(self, path: str | Path, line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}")
        self.path, self.line, self.message = str(path), line, message


def split_lines(text: str) -> list[str]:
    """The lines of JSON Lines ``text``, split at ``"\\n"`` only; a final ``"\\n"`` ends the
    last line (it does not start an empty one). Line ``k`` of the file is item ``k - 1``."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def numbered_lines(text: str) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of each non-blank line of ``text`` (numbers from 1, blank
    lines counted)."""
    for n, line in enumerate(split_lines(text), 1):
        if line.strip():
            yield n, line


def read_text(path: str | Path) -> str:
    """The file as UTF-8 text (``UnicodeDecodeError`` / ``OSError`` propagate)."""
    return Path(path).read_bytes().decode("utf-8")


def read_records(path: str | Path) -> Iterator[tuple[int, str, Any]]:
    """``(line number, line, parsed value)`` of each non-blank line of the file at ``path``.

    Raises:
        JsonlError: a line that is not JSON (or a file that is not UTF-8), naming the line.
    """
    try:
        text = read_text(path)
    except UnicodeDecodeError as exc:
        line = Path(path).read_bytes()[: exc.start].count(b"\n") + 1
        raise JsonlError(path, line, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    for n, line in numbered_lines(text):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise JsonlError(path, n, f"not valid JSON: {exc.msg} (column {exc.colno})") from None
        yield n, line, obj


def read_objects(path: str | Path) -> Iterator[tuple[int, Any]]:
    """``(line number, parsed value)`` of each non-blank line (see :func:`read_records`)."""
    for n, _, obj in read_records(path):
        yield n, obj


def dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps(obj)`` for files: UTF-8 text kept as is (``ensure_ascii=False``) and
    ``allow_nan=False``, so a NaN or an infinity raises ``ValueError`` rather than writing a
    token no JSON reader accepts. Use :func:`finite_or_null` first where a figure may be
    undefined (an interval of one value)."""
    kwargs.setdefault("ensure_ascii", False)
    return json.dumps(obj, allow_nan=False, **kwargs)


def finite_or_null(obj: Any) -> Any:
    """``obj`` with every NaN or infinite float (nested in dicts, lists and tuples) replaced
    by ``None``: an undefined figure (a confidence interval of one episode) written as
    JSON ``null``."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_or_null(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_or_null(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "shape", None) == ():  # numpy scalar
        return finite_or_null(obj.item())
    return obj
