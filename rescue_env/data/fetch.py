"""Download the public RESCUE-BENCH release and check it before use.

The release is ``data/benchmark_191.jsonl`` of the ``Tomsawyerhu/RESCUE-bench`` GitHub
repository: 191 annotated couple and family therapy dialogues, one JSON object per line, in
the schema :mod:`rescue_env.data` reads (also published on the Hugging Face hub as
``tomhu/relation_therapy``). The repository carries no licence file; the data's terms are
its authors' — cite the RESCUE-BENCH paper (``CITATION.cff``) and ask them before
redistributing it.

:func:`fetch_release` downloads it with ``pooch`` from a URL pinned to one commit of that
repository (so the bytes cannot change under a given URL), checks a SHA-256 when one is
given (``sha256=``, or :data:`RELEASE_SHA256` once pinned), writes the file's SHA-256 next to
it (``benchmark_191.jsonl.sha256``) so later runs can pin it, and validates the records
(:func:`rescue_env.data.validate`) and their count. A file that fails any check is removed.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

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
    """Download ``url`` to ``dest`` (skipped when ``dest`` exists, unless ``force``), check
    it and return what it holds. Raises :class:`FetchError` with the reason; a file that
    fails a check is deleted, so a later run does not pick it up."""
    import pooch

    dest = Path(dest).resolve()
    dest.parent.mkdir(parents=True, exist_ok=True)
    if force and dest.exists():
        dest.unlink()
    known = f"sha256:{sha256.lower()}" if sha256 else None
    try:
        pooch.retrieve(url, known_hash=known, fname=dest.name, path=dest.parent, progressbar=False)
    except ValueError as exc:  # pooch: hash mismatch (it removes the download itself)
        raise FetchError(f"{url}: {exc}") from exc
    except Exception as exc:  # requests' connection and HTTP errors
        raise FetchError(f"could not download {url}: {exc}") from exc
    digest = sha256_of(dest)
    if sha256 and digest != sha256.lower():  # an existing file that pooch did not re-check
        dest.unlink()
        raise FetchError(f"{dest}: SHA-256 {digest} is not the expected {sha256}; removed it, fetch again")
    report = validate(dest)
    if report.errors:
        dest.unlink()
        shown = "\n".join(str(p) for p in report.errors[:5])
        raise FetchError(f"{url} does not hold valid dialogues ({len(report.errors)} error(s)); removed it:\n{shown}")
    n = len(report.dialogues)
    if expected_dialogues is not None and n != expected_dialogues:
        dest.unlink()
        raise FetchError(f"{url} holds {n} dialogues, expected {expected_dialogues}; removed it")
    dest.with_name(dest.name + ".sha256").write_text(f"{digest}  {dest.name}\n", encoding="utf-8")
    couples = sum(d.scenario == "couple" for d in report.dialogues)
    return FetchResult(dest, digest, n, couples, n - couples)
