"""Download the public RESCUE-BENCH release and check it before use.

The release is ``data/benchmark_191.jsonl`` of the ``Tomsawyerhu/RESCUE-bench`` GitHub
repository: 191 annotated couple and family therapy dialogues, one JSON object per line, in
the schema :mod:`rescue_env.data` reads (also published on the Hugging Face hub as
``tomhu/relation_therapy``). The repository carries no licence file; the data's terms are
its authors' — cite the RESCUE-BENCH paper (``CITATION.cff``) and ask them before
redistributing it.

:func:`fetch_release` downloads it with ``pooch`` from a URL pinned to one commit of that
repository (so the bytes cannot change under a given URL) into a temporary file beside the
destination, checks it there — a SHA-256 when one is given (``sha256=``, or
:data:`RELEASE_SHA256` once pinned), the records (:func:`rescue_env.data.validate`) and their
count — and only then moves it into place (``os.replace``, atomic) with its SHA-256 beside it
(``benchmark_191.jsonl.sha256``, so later runs can pin it). A download that fails or fails a
check leaves nothing behind and changes nothing that was there.

A destination that already exists is never deleted: without ``force`` it is checked as it
is (nothing is downloaded) and kept whatever the result; with ``force`` it is replaced only
by a download that passed every check.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rescue_env.atomic import atomic_write_text
from rescue_env.data.loader import validate

log = logging.getLogger(__name__)

#: The commit of ``Tomsawyerhu/RESCUE-bench`` whose ``data/benchmark_191.jsonl`` is fetched.
RELEASE_COMMIT = "0d0b0793e23157c7af76d1d301e63fc705b27f2a"
RELEASE_URL = f"https://raw.githubusercontent.com/Tomsawyerhu/RESCUE-bench/{RELEASE_COMMIT}/data/benchmark_191.jsonl"
#: SHA-256 of the file at :data:`RELEASE_COMMIT`; ``None`` until measured on a fetched copy
#: (this project's machines had no access to GitHub): the commit-pinned URL fixes the bytes
#: meanwhile, and every fetch records its hash in ``<file>.sha256``.
RELEASE_SHA256: str | None = None
#: Dialogues in the release.
RELEASE_DIALOGUES = 191


class FetchError(RuntimeError):
    """The download failed, or the file failed a check (checksum, records, count)."""


@dataclass
class FetchResult:
    path: Path
    sha256: str
    dialogues: int
    couples: int
    families: int


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_release(
    dest: str | Path = "benchmark_191.jsonl",
    *,
    url: str = RELEASE_URL,
    sha256: str | None = RELEASE_SHA256,
    expected_dialogues: int | None = RELEASE_DIALOGUES,
    force: bool = False,
) -> FetchResult:
    """Download ``url`` to ``dest``, check it and return what it holds; an existing ``dest``
    is checked instead (nothing downloaded) unless ``force``.

    Raises :class:`FetchError` naming the cause and the fix. Whatever fails, the files that
    were there (``dest`` and ``dest.sha256``) are left as they were and no partial download
    remains."""
    dest = Path(dest).expanduser().resolve()
    if dest.is_dir():
        raise FetchError(f"{dest} is a folder; give the file to write, e.g. {dest / 'benchmark_191.jsonl'}")
    if dest.exists() and not force:
        return _check_existing(dest, sha256, expected_dialogues)
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".download", dir=dest.parent))
    try:
        part = _download(url, staging, sha256)
        result = _check(part, sha256, expected_dialogues, what=url)
        os.replace(part, dest)  # only a download that passed every check replaces anything
        atomic_write_text(_sidecar(dest), f"{result.sha256}  {dest.name}\n")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return FetchResult(dest, result.sha256, result.dialogues, result.couples, result.families)


def _sidecar(dest: Path) -> Path:
    return dest.with_name(dest.name + ".sha256")


def _download(url: str, folder: Path, sha256: str | None) -> Path:
    """``url`` downloaded into ``folder`` (pooch checks ``sha256`` when given)."""
    import pooch

    known = f"sha256:{sha256.lower()}" if sha256 else None
    try:
        return Path(pooch.retrieve(url, known_hash=known, fname="download.jsonl", path=folder, progressbar=False))
    except ValueError as exc:  # pooch: hash mismatch (it removes the download itself)
        raise FetchError(f"{url}: {exc}; nothing was written") from exc
    except Exception as exc:  # requests' connection and HTTP errors
        raise FetchError(f"could not download {url}: {exc}; nothing was written") from exc


def _check(path: Path, sha256: str | None, expected_dialogues: int | None, *, what: str) -> FetchResult:
    """Check the file at ``path`` (``what`` names it in messages) or raise :class:`FetchError`."""
    digest = sha256_of(path)
    if sha256 and digest != sha256.lower():
        raise FetchError(f"{what}: SHA-256 {digest} is not the expected {sha256}")
    report = validate(path)
    if report.errors:
        shown = "\n".join(str(p).replace(str(path), what, 1) for p in report.errors[:5])
        raise FetchError(f"{what} does not hold valid dialogues ({len(report.errors)} error(s)):\n{shown}")
    n = len(report.dialogues)
    if expected_dialogues is not None and n != expected_dialogues:
        raise FetchError(f"{what} holds {n} dialogues, expected {expected_dialogues}")
    couples = sum(d.scenario == "couple" for d in report.dialogues)
    return FetchResult(path, digest, n, couples, n - couples)


def _check_existing(dest: Path, sha256: str | None, expected_dialogues: int | None) -> FetchResult:
    """Check a ``dest`` that was there before this command; it is kept whatever the result,
    and its ``.sha256`` written only when there is none."""
    try:
        result = _check(dest, sha256, expected_dialogues, what=str(dest))
    except FetchError as exc:
        raise FetchError(
            f"{exc}\n{dest} was already there: nothing was downloaded and the file was kept. "
            "Fetch to another DEST, or pass --force to replace it with a download that passes the checks"
        ) from None
    sidecar = _sidecar(dest)
    if sidecar.is_file():
        recorded = (sidecar.read_text(encoding="utf-8").split() or [""])[0].lower()
        if recorded != result.sha256:
            raise FetchError(
                f"{dest} has SHA-256 {result.sha256}, but {sidecar.name} records {recorded or 'nothing'}: the file "
                "changed since it was fetched; both were kept. Fetch to another DEST, or pass --force to download it again"
            )
    else:
        atomic_write_text(sidecar, f"{result.sha256}  {dest.name}\n")
    return result
