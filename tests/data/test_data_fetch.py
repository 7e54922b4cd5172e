"""``rescue data fetch`` against a loopback HTTP server: a good file is kept with its
checksum recorded; a wrong checksum, invalid records, a wrong count or a 404 fail clearly
(exit 2), leave no file behind, and never delete or replace a file that was there."""

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
    assert r.rc == 2 and "rescue data fetch: error:" in r.err and "hash" in r.err.lower()
    assert not dest.exists()


def test_invalid_records_or_a_wrong_count_fail_and_leave_no_file(served, release, tmp_path: Path, run_cli):
    base, www = served
    (www / "broken.jsonl").write_text('{"sample_id": "x", "rows": "not a list"}\n', encoding="utf-8")
    dest = tmp_path / "broken.jsonl"
    r = run_cli("data", "fetch", dest, "--url", f"{base}/broken.jsonl")
    assert r.rc == 2 and "does not hold valid dialogues" in r.err and not dest.exists()
    url, _, n = release
    with pytest.raises(Exception, match=f"holds {n} dialogues, expected 191"):
        fetch_release(tmp_path / "short.jsonl", url=url, sha256=None)
    assert not (tmp_path / "short.jsonl").exists()


def test_an_unreachable_server_is_a_clear_error(tmp_path: Path, run_cli):
    r = run_cli("data", "fetch", tmp_path / "x.jsonl", "--url", "http://127.0.0.1:9/none.jsonl")
    assert r.rc == 2 and "could not download" in r.err


def _leftovers(folder: Path, keep: set[str]) -> list[str]:
    """Files in ``folder`` other than ``keep`` (a partial download, a temporary folder)."""
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)


def test_an_existing_file_is_checked_and_kept_never_deleted(release, tmp_path: Path, run_cli):
    """The user's own file at DEST (9 dialogues, not the release's 191): nothing is
    downloaded, the check fails on the count, the file stays byte for byte, and the message
    blames the file (not the URL) and gives the fix."""
    url, _, n = release
    dest = tmp_path / "benchmark_191.jsonl"
    write_jsonl(load_dialogues(bundled_seeds_path()), dest)
    before = dest.read_bytes()
    r = run_cli("data", "fetch", dest, "--url", url, "--expect", "191")
    assert r.rc == 2
    assert f"{dest} holds {n} dialogues, expected 191" in r.err
    assert "already there" in r.err and "nothing was downloaded" in r.err and "--force" in r.err
    assert url not in r.err
    assert dest.read_bytes() == before
    assert _leftovers(tmp_path, {"www", "benchmark_191.jsonl"}) == []


def test_an_existing_good_file_is_kept_and_its_checksum_recorded(release, tmp_path: Path, run_cli):
    url, digest, n = release
    dest = tmp_path / "bench.jsonl"
    write_jsonl(load_dialogues(bundled_seeds_path()), dest)
    r = run_cli("data", "fetch", dest, "--url", f"{url}.missing", "--expect", str(n))  # not fetched: the file is there
    assert r.rc == 0, r.err
    assert (tmp_path / "bench.jsonl.sha256").read_text().split()[0] == hashlib.sha256(dest.read_bytes()).hexdigest()


def test_force_with_a_url_that_404s_keeps_the_good_file_and_its_sidecar(release, tmp_path: Path, run_cli):
    url, digest, n = release
    dest = tmp_path / "good.jsonl"
    assert run_cli("data", "fetch", dest, "--url", url, "--expect", str(n)).rc == 0
    before, sidecar = dest.read_bytes(), (tmp_path / "good.jsonl.sha256").read_text()
    r = run_cli("data", "fetch", dest, "--force", "--url", url.replace("benchmark.jsonl", "nothing-here.jsonl"))
    assert r.rc == 2 and "could not download" in r.err and "404" in r.err
    assert dest.read_bytes() == before
    assert (tmp_path / "good.jsonl.sha256").read_text() == sidecar
    assert _leftovers(tmp_path, {"www", "good.jsonl", "good.jsonl.sha256"}) == []


def test_force_with_a_bad_payload_keeps_the_good_file(served, release, tmp_path: Path, run_cli):
    base, www = served
    url, digest, n = release
    dest = tmp_path / "good.jsonl"
    assert run_cli("data", "fetch", dest, "--url", url, "--sha256", digest).rc == 0
    before, sidecar = dest.read_bytes(), (tmp_path / "good.jsonl.sha256").read_text()
    (www / "bad.jsonl").write_text('{"sample_id": "x", "rows": "not a list"}\n', encoding="utf-8")
    r = run_cli("data", "fetch", dest, "--force", "--url", f"{base}/bad.jsonl")
    assert r.rc == 2 and "does not hold valid dialogues" in r.err
    r = run_cli("data", "fetch", dest, "--force", "--url", url, "--sha256", "0" * 64)
    assert r.rc == 2 and "hash" in r.err.lower()
    assert dest.read_bytes() == before
    assert (tmp_path / "good.jsonl.sha256").read_text() == sidecar
    assert _leftovers(tmp_path, {"www", "good.jsonl", "good.jsonl.sha256"}) == []


def test_force_replaces_the_file_with_a_download_that_passes(served, release, tmp_path: Path, run_cli):
    url, digest, n = release
    dest = tmp_path / "bench.jsonl"
    dest.write_text("my notes\n", encoding="utf-8")
    r = run_cli("data", "fetch", dest, "--force", "--url", url, "--sha256", digest)
    assert r.rc == 0, r.err
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == digest
    assert (tmp_path / "bench.jsonl.sha256").read_text().split()[0] == digest


def test_an_existing_file_that_no_longer_matches_its_sidecar_is_kept(release, tmp_path: Path, run_cli):
    url, digest, n = release
    dest = tmp_path / "bench.jsonl"
    assert run_cli("data", "fetch", dest, "--url", url, "--expect", str(n)).rc == 0
    lines = dest.read_text(encoding="utf-8").splitlines(keepends=True)
    dest.write_text("".join(lines[:-1]), encoding="utf-8")  # the user cut a dialogue
    before = dest.read_bytes()
    r = run_cli("data", "fetch", dest, "--url", url, "--expect", str(n - 1))
    assert r.rc == 2 and "changed since it was fetched" in r.err
    assert dest.read_bytes() == before and (tmp_path / "bench.jsonl.sha256").read_text().split()[0] == digest


def test_dest_a_folder_is_a_user_error(tmp_path: Path, run_cli):
    r = run_cli("data", "fetch", tmp_path, "--url", "http://127.0.0.1:9/none.jsonl")
    assert r.rc == 2 and "is a folder" in r.err
