"""The one reader and writer of JSON Lines files (datasets, a run folder's episodes file,
details and judgement files), plain or gzip-compressed.

Lines end at ``"\\n"`` only. ``str.splitlines`` (and anything built on it) also ends a line
at U+2028, U+2029, U+0085 and a few control characters, which JSON allows raw inside a
string: an LLM reply holding U+2028 would cut its episode's line in two, and every line
number after it would be wrong. Splitting on ``"\\n"`` accepts the whole of JSON; a
``"\\r"`` before it is JSON whitespace and needs no special case.

Writing goes through :func:`dumps`: ``NaN`` and ``Infinity`` are not JSON, so a non-finite
number is refused (a bug upstream) instead of being written where no JSON reader can read it.

Gzip: a file that starts with gzip's magic bytes (``1f 8b``) is read as gzip whatever its
name (a user's ``dialogues.jsonl.gz`` as much as a run's ``episodes.jsonl.gz``); anything
else is read as plain text. A gzip file may hold many members one after another (an
append-only writer adds one per line, :func:`encode_line`); they are read one at a time, so
a file cut inside its last member (a killed write) is told apart from a whole one: readers
raise :class:`JsonlError` naming the line after the last whole one (line numbers count the
decompressed text's lines), and a resuming writer keeps the whole members
(:func:`decode`). Python's ``gzip`` module cannot do this: it raises on a cut tail without
saying where the whole data ends.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The first two bytes of every gzip member.
GZIP_MAGIC = b"\x1f\x8b"
# gzip level of written lines: 6 (zlib's default) is within 3 % of 9's size on episodes at
# about half its time
_GZIP_LEVEL = 6
# compressed bytes fed to the decompressor at a time: what a member leaves over is at most
# this much, so reading stays linear in the file's size however many members it holds
_CHUNK = 1 << 16


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


@dataclass
class Decoded:
    """A JSON Lines file's bytes with any gzip taken off (:func:`decode`)."""

    #: the text's bytes (decompressed: of the whole members only)
    data: bytes
    #: the file is gzip (starts with :data:`GZIP_MAGIC`)
    gzip: bool = False
    #: gzip only: ``(end in the file, end in data)`` of each whole member, in order
    members: list[tuple[int, int]] = field(default_factory=list)
    #: why the file's bytes after the last whole member are not one (None: the file is whole)
    cut: str | None = None

    def whole_prefix(self, data_end: int) -> tuple[int, int]:
        """``(file bytes, text bytes)`` to keep so as to keep ``data[:data_end]`` and nothing
        after it: plain text, ``data_end`` both; gzip, the whole members whose text ends at
        or before ``data_end`` (a member is not kept by halves), and the text they hold."""
        if not self.gzip:
            return data_end, data_end
        return max(((raw, end) for raw, end in self.members if end <= data_end), default=(0, 0))


def decode(raw: bytes) -> Decoded:
    """Take gzip off ``raw`` (a file's bytes) if it starts with :data:`GZIP_MAGIC`, one
    member at a time, stopping at the first that is cut, corrupt or not gzip
    (:attr:`Decoded.cut` says which, with its byte offset); plain bytes are returned as they
    are."""
    if not raw.startswith(GZIP_MAGIC):
        return Decoded(raw)
    view = memoryview(raw)
    out = bytearray()
    members: list[tuple[int, int]] = []
    pos, cut = 0, None
    while pos < len(raw) and cut is None:
        if raw[pos : pos + 2] != GZIP_MAGIC:
            cut = f"the bytes from {pos} on are not gzip data"
            break
        member, at = zlib.decompressobj(wbits=31), pos  # wbits=31: one gzip member, header and CRC checked
        try:
            while not member.eof and at < len(raw):
                out += member.decompress(view[at : at + _CHUNK])
                at = min(at + _CHUNK, len(raw))
        except zlib.error as exc:
            cut = f"the gzip member at byte {pos} is corrupt ({exc})"
            break
        if not member.eof:
            cut = f"the file ends inside the gzip member at byte {pos} (a write that did not finish)"
            break
        pos = at - len(member.unused_data)
        members.append((pos, len(out)))
    data = bytes(out[: members[-1][1]]) if members else b""  # a cut member's partial text is not kept
    return Decoded(data, True, members, cut)


def read_bytes(path: str | Path) -> bytes:
    """The bytes of the JSON Lines file at ``path``, gzip taken off.

    Raises:
        JsonlError: a gzip file cut or corrupt, naming the line after the last whole one.
    """
    decoded = decode(Path(path).read_bytes())
    if decoded.cut is not None:
        whole = decoded.data.count(b"\n")
        raise JsonlError(path, whole + 1, f"{decoded.cut}; the {whole} lines before it are whole")
    return decoded.data


def read_text(path: str | Path) -> str:
    """The file as UTF-8 text, gzip taken off (``UnicodeDecodeError`` / ``OSError``
    propagate; :class:`JsonlError` for a cut gzip file, see :func:`read_bytes`)."""
    return read_bytes(path).decode("utf-8")


def encode_line(line: str, *, compress: bool) -> bytes:
    """The bytes that append ``line`` (one JSON value, no ``"\n"``) to a JSON Lines file:
    the line and its ``"\n"`` in UTF-8, as one whole gzip member when ``compress``. The
    member's header has no time stamp, so the same lines give the same bytes."""
    data = (line + "\n").encode("utf-8")
    return gzip.compress(data, compresslevel=_GZIP_LEVEL, mtime=0) if compress else data


def encode_lines(lines: Iterator[str] | list[str], *, compress: bool) -> bytes:
    """A whole JSON Lines file of ``lines`` (:func:`encode_line` each: gzip, one member per
    line, when ``compress``)."""
    return b"".join(encode_line(line, compress=compress) for line in lines)


def read_records(path: str | Path) -> Iterator[tuple[int, str, Any]]:
    """``(line number, line, parsed value)`` of each non-blank line of the file at ``path``
    (plain or gzip: see the module docstring).

    Raises:
        JsonlError: a line that is not JSON (or a file that is not UTF-8, or a gzip file
            cut inside a member), naming the line.
    """
    data = read_bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
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
