"""``rescue data fetch`` against a loopback HTTP server: a good file is kept with its
checksum recorded; a wrong checksum, invalid records or a wrong count fail clearly and leave
no file behind."""

from __future__ import annotations

import functools
import hashlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rescue_env.data import bundled_seeds_path, load_dialogues, write_jsonl
from rescue_env.data.fetch import RELEASE_URL, fetch_release


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An HTTP server on 127.0.0.1 serving ``tmp_path/www``; yields (base URL, folder)."""
    www = tmp_path / "www"
    www.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(www))
    handler.log_message = lambda *a, **k: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", www
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def release(served) -> tuple[str, str, int]:
    """The bundled seeds published as a JSON Lines file: (URL, sha256, dialogues)."""
    base, www = served
    dialogues = load_dialogues(bundled_seeds_path())
    write_jsonl(dialogues, www / "benchmark.jsonl")
    digest = hashlib.sha256((www / "benchmark.jsonl").read_bytes()).hexdigest()
    return f"{base}/benchmark.jsonl", digest, len(dialogues)


def test_the_default_url_is_pinned_to_a_commit():
    assert "/Tomsawyerhu/RESCUE-bench/" in RELEASE_URL and RELEASE_URL.endswith("/data/benchmark_191.jsonl")
    commit = RELEASE_URL.split("/")[-3]
    assert len(commit) == 40 and int(commit, 16) >= 0


def test_a_good_file_is_kept_and_its_checksum_recorded(release, tmp_path: Path, run_cli):
    url, digest, n = release
    dest = tmp_path / "data" / "bench.jsonl"
    r = run_cli("data", "fetch", dest, "--url", url, "--sha256", digest, "--expect", str(n))
    assert r.rc == 0, r.err
    assert f"{n} dialogues" in r.out and digest in r.out and f"data.path={dest}" in r.out
    assert len(load_dialogues(dest)) == n
    assert (tmp_path / "data" / "bench.jsonl.sha256").read_text().split()[0] == digest


def test_a_wrong_checksum_fails_and_leaves_no_file(release, tmp_path: Path, run_cli):
    url, _, _ = release
    dest = tmp_path / "bench.jsonl"
    r = run_cli("data", "fetch", dest, "--url", url, "--sha256", "0" * 64)
    assert r.rc == 1 and "rescue data fetch:" in r.err and "hash" in r.err.lower()
    assert not dest.exists()


def test_invalid_records_or_a_wrong_count_fail_and_leave_no_file(served, release, tmp_path: Path, run_cli):
    base, www = served
    (www / "broken.jsonl").write_text('{"sample_id": "x", "rows": "not a list"}\n', encoding="utf-8")
    dest = tmp_path / "broken.jsonl"
    r = run_cli("data", "fetch", dest, "--url", f"{base}/broken.jsonl")
    assert r.rc == 1 and "does not hold valid dialogues" in r.err and not dest.exists()
    url, _, n = release
    with pytest.raises(Exception, match=f"holds {n} dialogues, expected 191"):
        fetch_release(tmp_path / "short.jsonl", url=url, sha256=None)
    assert not (tmp_path / "short.jsonl").exists()


def test_an_unreachable_server_is_a_clear_error(tmp_path: Path, run_cli):
    r = run_cli("data", "fetch", tmp_path / "x.jsonl", "--url", "http://127.0.0.1:9/none.jsonl")
    assert r.rc == 1 and "could not download" in r.err
