"""On-disk cache of Chat Completions replies, for offline replay of LLM runs.

Stored in one SQLite file (``responses.sqlite3`` in the cache folder) through the standard
library's ``sqlite3``: no extra dependency, atomic writes that survive a killed run, safe
for concurrent readers and writers (WAL journal), and a single file a user can copy
beside a run to replay it elsewhere. Each row holds only the request's fingerprint (a
SHA-256 of the request as sent, without headers) and the reply's text and token usage:
no key, header or prompt text is written.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any


def fingerprint(payload: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of ``payload`` (sorted keys, no whitespace)."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class ResponseCache:
    """Maps request fingerprints to reply records (JSON-serialisable dicts).

    One instance may be shared by the coroutines and threads of one process.
    """

    FILENAME = "responses.sqlite3"

    def __init__(self, cache_dir: str | Path) -> None:
        self.path = Path(cache_dir) / self.FILENAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One connection behind a lock: sqlite3 objects are not safe to share unguarded.
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, reply TEXT NOT NULL)")

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored reply for ``key``, or None."""
        with self._lock:
            row = self._db.execute("SELECT reply FROM replies WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def put(self, key: str, reply: dict[str, Any]) -> None:
        """Store ``reply`` under ``key`` (the first stored reply wins, so replays stay fixed)."""
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO replies (key, reply) VALUES (?, ?)", (key, json.dumps(reply)))

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM replies").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()
