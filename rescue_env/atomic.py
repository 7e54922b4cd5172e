"""Atomic file writes: a reader (or a crash) sees the old file or the new one, never a
half-written one. The new content goes to a temporary file in the same folder, is flushed
to disk (``fsync``), then replaces the target with ``os.replace``."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", *, encoding: str | None = "utf-8", newline: str | None = None) -> Iterator[IO]:
    """Open a temporary file beside ``path`` for writing; on a clean exit it replaces
    ``path`` (mode bits of an existing target kept), on an exception it is removed and
    ``path`` is left as it was.

    ``mode`` is ``"w"`` (text) or ``"wb"`` (bytes).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files: mode 'w' or 'wb', not {mode!r}")
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": encoding, "newline": newline})) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.chmod(tmp, target.stat().st_mode & 0o7777)
        except FileNotFoundError:
            os.chmod(tmp, 0o644)  # mkstemp's 0o600 would hide outputs from the group
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str, *, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically; returns the path."""
    with atomic_open(path, "w", encoding=encoding) as fh:
        fh.write(text)
    return Path(path)


def save_figure(fig, path: str | Path, **kwargs) -> Path:
    """``fig.savefig(path, **kwargs)``, atomically (the format follows the suffix)."""
    target = Path(path)
    with atomic_open(target, "wb") as fh:
        fig.savefig(fh, format=target.suffix.lstrip(".") or "png", **kwargs)
    return target
