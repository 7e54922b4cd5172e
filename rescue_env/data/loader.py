"""Loading and validating RESCUE-BENCH dialogues from either layout.

Layouts:

- **JSON Lines**: one dialogue object per line (``benchmark_191.jsonl``); ``sample_id`` from
  the record. Gzip-compressed JSON Lines (``dialogues.jsonl.gz``, a run's
  ``episodes.jsonl.gz``) read the same: gzip is told by the file's first bytes
  (:mod:`rescue_env.jsonl`), line numbers count the decompressed lines.
- **Directory**: one ``.json`` file per sample anywhere below the root, each an object with a
  top-level ``rows`` list; ``sample_id`` is the path relative to the root without the suffix
  (``family_therapy/003/merged``). Files named ``manifest.json`` are skipped.
- **Directory of JSON Lines files**: a directory holding ``.jsonl`` (or ``.jsonl.gz``) files anywhere below it
  (``../shared/data`` with one slice per subfolder) reads every one of them, in path order.
- **Several paths**: a list of any of the above (``data.path=[A,B]`` on the command line)
  reads them all as one data set; a sample id must be unique across them.

Every problem is reported as ``FILE:LINE: field: what is wrong (what was expected)``. The
whole input is checked before anything is returned, so a caller never gets a partial load:
:func:`load_dialogues` either returns every dialogue or raises
:class:`~rescue_env.data.errors.DataValidationError` listing every error.

Quirks handled (see the subset's README): two relation-label fields; ``""`` (no clear pattern)
kept distinct from ``null`` (not annotated); ``target`` as a string or a list mixing names,
group labels and dyads; people named in annotations who are not participants (kept in
``Dialogue.mentioned``); participants inferred when absent; mis-decoded punctuation
(UTF-8 read as Latin-1) repaired with ``ftfy`` while ``Row.raw`` keeps the published text.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from os import PathLike
from typing import Any, Iterable, NamedTuple, Union

import ftfy

from rescue_env.data.errors import DataValidationError, Problem
from rescue_env.data.schema import (
    GROUP_LABELS,
    NON_CLIENT_NAMES,
    THERAPIST,
    BackgroundUtterance,
    Dialogue,
    EmotionRecord,
    InteractionBehavior,
    PersonDescription,
    Row,
    Scenario,
    StrategyRecord,
    ViewpointRecord,
)
from rescue_env.jsonl import JsonlError, numbered_lines, read_text, split_lines

#: Row keys that the schema knows; anything else is kept in ``Row.extras``.
ROW_KEYS = frozenset(
    {
        "row_index", "start_time", "end_time", "primary_speaker", "target", "dialogue_cleaned",
        "utterance_type", "background_dialogue", "tone_of_voice", "body_posture", "facial_expressions",
        "self_directed_behavior", "interaction_behavior", "internal_emotion", "viewpoints_attitudes",
        "support_strategy", "relation_cycle_state", "relation_cycle_reason", "relation_cycle_evidence_rows",
        "relation_pattern", "relation_pattern_reason", "relation_pattern_evidence_rows",
    }
)
DIALOGUE_KEYS = frozenset({"sample_id", "scenario", "participants", "source_file", "rows"})


def bundled_seeds_path() -> Path:
    """Folder of the seed dialogues shipped with the package (the default data set)."""
    return Path(str(resources.files("rescue_env.data").joinpath("seeds")))


#: What every loader takes as ``path``: one file or directory, several of them (any iterable
#: of paths, e.g. Hydra's ``data.path=[A,B]``), or ``None`` for the bundled seeds.
DataPath = Union[str, PathLike, Iterable[Union[str, PathLike]], None]


def resolve_data_path(path: str | Path | None) -> Path:
    """One ``path`` as a :class:`Path`, or the bundled seeds when ``path`` is ``None`` or
    empty. For a value that may name several paths use :func:`resolve_data_paths`."""
    if path is None or str(path).strip() == "":
        return bundled_seeds_path()
    return Path(path).expanduser()


def resolve_data_paths(path: DataPath) -> list[Path]:
    """The files and per-sample directories ``path`` names, in the order read.

    ``None`` or ``""`` → the bundled seeds; a list → each of its items in turn; a directory
    holding ``.jsonl`` / ``.jsonl.gz`` files → those files (sorted by path); any other directory → itself
    (read as per-sample ``.json`` files); a file → itself. A path that does not exist is
    returned as given (the loader reports it).
    """
    return _expand_data_path(path)[0]


def _expand_data_path(path: DataPath) -> tuple[list[Path], list[Problem]]:
    """:func:`resolve_data_paths` plus the problems of the layout: a directory that mixes
    ``.jsonl`` files with per-sample ``.json`` files is an error (one of them would be skipped)."""
    if path is None or isinstance(path, (str, PathLike)):
        items: list[Any] = [path]
    else:
        items = list(path)
        if not items:
            raise ValueError("no data path given: an empty list (use null for the bundled seeds)")
    out: list[Path] = []
    problems: list[Problem] = []
    for item in items:
        root = resolve_data_path(None if item is None else str(item))
        jsonl = sorted([*root.rglob("*.jsonl"), *root.rglob("*.jsonl.gz")]) if root.is_dir() else []
        if jsonl and any(p.name != "manifest.json" for p in root.rglob("*.json")):
            problems.append(
                Problem(str(root), 0, "path", "directory holds both .jsonl files and per-sample .json files",
                        "one layout per directory; name the parts as a list: data.path=[A,B]")
            )
        for p in jsonl:
            if p.suffix == ".gz" and p.with_suffix("") in jsonl:  # a run folder's two episodes files, say
                problems.append(
                    Problem(str(p), 0, "path", f"{p.parent} holds both {p.name} and {p.with_suffix('').name}",
                            "one of them: the same records twice would be read; move one out of the folder")
                )
        out.extend(jsonl or [root])
    return out, problems


def data_sources(path: DataPath, dialogues: Iterable[Dialogue] = ()) -> list[dict[str, Any]]:
    """Provenance of what ``path`` reads, one entry per file or per-sample directory:
    ``path`` (``rescue_env/data/seeds`` for the bundled seeds), ``sha256`` (of the file's
    bytes; for a directory, of each ``.json`` file's relative path and bytes in path order)
    and, when ``dialogues`` (loaded from ``path``) are given, how many came from it."""
    seeds = bundled_seeds_path().resolve()
    ds = list(dialogues)
    out: list[dict[str, Any]] = []
    for root in resolve_data_paths(path):
        digest = hashlib.sha256()
        if root.is_dir():
            files = sorted(p for p in root.rglob("*.json") if p.name != "manifest.json")
            for f in files:
                digest.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
            inside = {str(f) for f in files}
            n = sum(d.origin[0] in inside for d in ds)
        else:
            digest.update(root.read_bytes())
            n = sum(d.origin[0] == str(root) for d in ds)
        name = "rescue_env/data/seeds" if root.resolve() == seeds else str(root)
        entry: dict[str, Any] = {"path": name, "sha256": digest.hexdigest()}
        if ds:
            entry["dialogues"] = n
        out.append(entry)
    return out


def describe_data_path(path: DataPath) -> str:
    """A printable name of the data ``path`` reads (for summaries and provenance)."""
    return ", ".join(str(p) for p in resolve_data_paths(path))


# ---------------------------------------------------------------------------------------------
# text repair


def fix_text(value: str) -> str:
    """Repair mis-decoded punctuation (``â€™`` → ``’``); ASCII text is returned unchanged."""
    if value.isascii():
        return value
    # keep correctly encoded curly quotes as published; only mis-decoding is repaired
    return ftfy.fix_text(value, uncurl_quotes=False)


# ---------------------------------------------------------------------------------------------
# report


@dataclass
class ValidationReport:
    """What :func:`validate` found: the dialogues (only when there are no errors), errors and
    warnings, and label counts for the summary."""

    path: str
    dialogues: list[Dialogue] = field(default_factory=list)
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def summary(self) -> str:
        """Human-readable summary: dialogues and rows per scenario, label counts, warnings."""
        by_scn: Counter[str] = Counter(d.scenario for d in self.dialogues)
        rows_by_scn: Counter[str] = Counter()
        patterns: Counter[str] = Counter()
        strategies: Counter[str] = Counter()
        utterances: Counter[str] = Counter()
        for d in self.dialogues:
            rows_by_scn[d.scenario] += len(d.rows)
            for r in d.rows:
                if r.relation_label:
                    patterns[f"{d.scenario}:{r.relation_label}"] += 1
                for s in r.support_strategy:
                    if s.strategy_type:
                        strategies[f"{d.scenario}:{s.strategy_type}"] += 1
                if r.utterance_type:
                    utterances[r.utterance_type] += 1
        total_rows = sum(rows_by_scn.values())
        lines = [f"{self.path}: {len(self.dialogues)} dialogues, {total_rows} rows"]
        for scn in sorted(by_scn):
            sizes = Counter(len(d.participants) for d in self.dialogues if d.scenario == scn)
            members = ", ".join(f"{n} members × {k}" for n, k in sorted(sizes.items()))
            lines.append(f"  {scn}: {by_scn[scn]} dialogues, {rows_by_scn[scn]} rows ({members})")

        def block(title: str, counts: Counter[str]) -> None:
            lines.append(f"{title}:")
            for k, v in sorted(counts.items()):
                lines.append(f"  {k}: {v}")

        block("relation patterns (rows)", patterns)
        block("support strategies", strategies)
        block("utterance types", utterances)
        lines.append(f"warnings: {len(self.warnings)}")
        for w in self.warnings:
            lines.append(f"  {w}")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# public API


def load_dialogues(path: DataPath = None, *, strict: bool = False, unknown_patterns: str = "error") -> list[Dialogue]:
    """Load every dialogue under ``path`` (a ``.jsonl`` file, a ``.json`` file, a directory,
    or a list of those: see :func:`resolve_data_paths`); the bundled seeds when ``path`` is
    ``None``. The one loader every command's ``data.path`` goes through.

    ``strict`` turns warnings (unknown strategy or utterance-type labels…) into errors. A
    ``participants`` string and a speaker missing from ``participants`` are always errors.
    An unknown relation-pattern label (``relation_pattern`` / ``relation_cycle_state``) is an
    error by default (``unknown_patterns="error"``: a pattern seeds an episode's start state
    and the fitted transitions, and a dropped label would start it from another pattern);
    ``unknown_patterns="warning"`` makes it a warning and keeps the label, for readers that
    count and exclude such labels (the RPP task's out-of-taxonomy gold).

    Raises:
        DataValidationError: one :class:`Problem` per error, nothing loaded.
    """
    report = validate(path, strict=strict, unknown_patterns=unknown_patterns)
    if report.errors:
        raise DataValidationError(report.errors)
    return report.dialogues


def validate(path: DataPath = None, *, strict: bool = False, unknown_patterns: str = "error") -> ValidationReport:
    """Check and parse everything under ``path`` (see :func:`load_dialogues`) without raising
    on data problems. Groups larger than their scenario's default env are warnings (see
    :func:`rescue_env.data.groups.group_size_warnings`)."""
    from rescue_env.data.groups import group_size_warnings

    if unknown_patterns not in ("error", "warning"):
        raise ValueError(f"unknown_patterns must be 'error' or 'warning', got {unknown_patterns!r}")
    checks = _Checks(strict, unknown_patterns)
    roots, problems = _expand_data_path(path)
    report = ValidationReport(path=", ".join(str(r) for r in roots))
    dialogues: list[Dialogue] = []
    for root in roots:
        _read_path(root, checks, dialogues, problems)

    seen: dict[str, tuple[str, int]] = {}
    for d in dialogues:
        if d.sample_id in seen:
            f, line = seen[d.sample_id]
            problems.append(
                Problem(d.origin[0], d.origin[1], "sample_id", f"duplicate {d.sample_id!r} (first at {f}:{line})", "unique sample ids")
            )
        else:
            seen[d.sample_id] = d.origin

    report.errors = [p for p in problems if p.severity == "error"]
    report.warnings = [p for p in problems if p.severity == "warning"] + group_size_warnings(dialogues)
    if not report.errors:
        report.dialogues = dialogues
    return report


def _read_path(root: Path, checks: "_Checks", dialogues: list[Dialogue], problems: list[Problem]) -> None:
    """Parse one file or per-sample directory into ``dialogues``, its problems into ``problems``."""
    if not root.exists():
        problems.append(Problem(str(root), 0, "path", "does not exist", "a .jsonl file or a directory of .json files"))
    elif root.is_dir():
        files = sorted(p for p in root.rglob("*.json") if p.name != "manifest.json")
        if not files:
            problems.append(Problem(str(root), 0, "path", "directory holds no .json files", "one .json file per sample"))
        for f in files:
            sample_id = f.relative_to(root).with_suffix("").as_posix()
            d, ps = _read_json_file(f, sample_id, checks)
            problems.extend(ps)
            if d is not None:
                dialogues.append(d)
    elif root.suffix == ".json":
        d, ps = _read_json_file(root, root.stem, checks)
        problems.extend(ps)
        if d is not None:
            dialogues.append(d)
    else:
        ds, ps = _read_jsonl(root, checks)
        problems.extend(ps)
        dialogues.extend(ds)


def write_jsonl(dialogues: Iterable[Dialogue], path: str | Path) -> Path:
    """Write dialogues as benchmark JSON Lines (readable by :func:`load_dialogues`); gzip
    (one member per line) when ``path`` ends in ``.gz``.

    The file is replaced atomically: killed mid-write, ``path`` keeps its old content
    (which may be the very file the dialogues were read from)."""
    from rescue_env.atomic import atomic_open
    from rescue_env.jsonl import encode_line

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(out, "wb") as fh:
        for d in dialogues:
            fh.write(encode_line(json.dumps(d.to_dict(), ensure_ascii=False), compress=out.name.endswith(".gz")))
    return out


def parse_dialogue(
    obj: Any,
    *,
    file: str = "<memory>",
    line: int = 1,
    sample_id: str | None = None,
    row_lines: list[int] | None = None,
    rows_line: int | None = None,
    strict: bool = False,
    unknown_patterns: str = "error",
) -> tuple[Dialogue | None, list[Problem]]:
    """Parse one dialogue object. Returns ``(dialogue or None, problems)``; ``None`` only when
    the record has errors. ``row_lines`` gives the file line of each row and ``rows_line``
    that of the ``rows`` key, when known (per-sample files). ``strict`` and
    ``unknown_patterns`` as in :func:`load_dialogues`."""
    return _DialogueParser(file, line, row_lines, _Checks(strict, unknown_patterns), rows_line).parse(obj, sample_id)


class _Checks(NamedTuple):
    """How hard the parser is on labels (see :func:`load_dialogues`)."""

    strict: bool = False
    unknown_patterns: str = "error"


# ---------------------------------------------------------------------------------------------
# files


def _read_jsonl(path: Path, checks: _Checks) -> tuple[list[Dialogue], list[Problem]]:
    file = str(path)
    try:
        text = read_text(path)  # plain or gzip (told by its first bytes)
    except UnicodeDecodeError as e:
        return [], [Problem(file, 1, "file", f"not UTF-8 text ({e.reason} at byte {e.start})", "UTF-8 JSON Lines")]
    except JsonlError as e:  # a gzip file cut inside a member
        return [], [Problem(file, e.line, "file", e.message, "a whole .jsonl.gz file (gzip it again from the source)")]
    except OSError as e:
        return [], [Problem(file, 0, "path", f"cannot be read ({e.strerror})", "a readable file")]
    if not text.strip():
        return [], [Problem(file, 1, "file", "empty file", "at least one dialogue, one JSON object per line")]
    dialogues: list[Dialogue] = []
    problems: list[Problem] = []
    # "\n" ends a line, nothing else: U+2028 / U+0085 are allowed raw inside JSON strings
    lines = split_lines(text)
    for lineno, raw_line in numbered_lines(text):
        try:
            obj = json.loads(raw_line)
        except json.JSONDecodeError as e:
            truncated = lineno == len(lines) and not text.endswith("\n") or "Unterminated" in e.msg or e.pos >= len(raw_line.rstrip())
            what = "truncated JSON" if truncated else "not valid JSON"
            problems.append(Problem(file, lineno, "record", f"{what}: {e.msg} (column {e.colno})", "one complete JSON object per line"))
            continue
        d, ps = parse_dialogue(obj, file=file, line=lineno, strict=checks.strict, unknown_patterns=checks.unknown_patterns)
        problems.extend(ps)
        if d is not None:
            dialogues.append(d)
    return dialogues, problems


_ROWS_KEY = re.compile(r'"rows"\s*:\s*\[')
_ROWS_FIELD = re.compile(r'"rows"\s*:')


def _row_line_numbers(text: str) -> list[int] | None:
    """1-based line of each element of the top-level ``rows`` array, found by decoding the
    array element by element; ``None`` when the layout defeats the scan."""
    m = _ROWS_KEY.search(text)
    if not m:
        return None
    decoder = json.JSONDecoder()
    pos = m.end()
    lines: list[int] = []
    n = len(text)
    try:
        while pos < n:
            while pos < n and text[pos] in " \t\r\n,":
                pos += 1
            if pos >= n or text[pos] == "]":
                break
            lines.append(text.count("\n", 0, pos) + 1)
            _, pos = decoder.raw_decode(text, pos)
    except json.JSONDecodeError:
        return None
    return lines


def _read_json_file(path: Path, sample_id: str, checks: _Checks) -> tuple[Dialogue | None, list[Problem]]:
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        return None, [Problem(file, 1, "file", f"not UTF-8 text ({e.reason} at byte {e.start})", "UTF-8 JSON")]
    except OSError as e:
        return None, [Problem(file, 0, "path", f"cannot be read ({e.strerror})", "a readable file")]
    if not text.strip():
        return None, [Problem(file, 1, "file", "empty file", 'a JSON object with a "rows" list')]
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        what = "truncated JSON" if e.pos >= len(text.rstrip()) or "Unterminated" in e.msg else "not valid JSON"
        return None, [Problem(file, e.lineno, "record", f"{what}: {e.msg} (line {e.lineno}, column {e.colno})", 'a JSON object with a "rows" list')]
    key = _ROWS_FIELD.search(text)
    rows_line = text.count("\n", 0, key.start()) + 1 if key else 1
    return parse_dialogue(
        obj, file=file, line=1, sample_id=sample_id, row_lines=_row_line_numbers(text), rows_line=rows_line,
        strict=checks.strict, unknown_patterns=checks.unknown_patterns,
    )


# ---------------------------------------------------------------------------------------------
# parsing


def _typename(v: Any) -> str:
    return "null" if v is None else type(v).__name__


class _DialogueParser:
    """Parses one dialogue object, collecting problems with their file and line."""

    def __init__(self, file: str, line: int, row_lines: list[int] | None, checks: _Checks, rows_line: int | None = None):
        self.file = file
        self.line = line
        self.rows_line = rows_line or line
        self.row_lines = row_lines
        self.strict = checks.strict
        self.unknown_patterns = checks.unknown_patterns
        self.problems: list[Problem] = []
        self.row_i = -1

    # problems ------------------------------------------------------------------------------
    def _line(self) -> int:
        if self.row_lines is not None and 0 <= self.row_i < len(self.row_lines):
            return self.row_lines[self.row_i]
        return self.line

    def error(self, fld: str, message: str, expected: str) -> None:
        self.problems.append(Problem(self.file, self._line(), fld, message, expected, "error"))

    def warn(self, fld: str, message: str, expected: str) -> None:
        sev = "error" if self.strict else "warning"
        self.problems.append(Problem(self.file, self._line(), fld, message, expected, sev))  # type: ignore[arg-type]

    # primitives ----------------------------------------------------------------------------
    def text(self, obj: dict, key: str, fld: str) -> str:
        v = obj.get(key)
        if v is None:
            return ""
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return str(v)
        if not isinstance(v, str):
            self.error(fld, f"is a {_typename(v)}", "a string")
            return ""
        return fix_text(v).strip()

    def opt_label(self, obj: dict, key: str, fld: str) -> str | None:
        if key not in obj or obj[key] is None:
            return None
        v = obj[key]
        if not isinstance(v, str):
            self.error(fld, f"is a {_typename(v)}", "a label string, \"\" or null")
            return None
        return v.strip()

    def opt_text(self, obj: dict, key: str, fld: str) -> str | None:
        if key not in obj or obj[key] is None:
            return None
        return self.text(obj, key, fld)

    def number(self, v: Any, fld: str, *, required: bool) -> float | None:
        if v is None:
            if required:
                self.error(fld, "missing", "a number")
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            self.error(fld, f"{v!r} is not a number", "a number")
            return None
        return float(v)

    def names(self, v: Any, fld: str) -> list[str]:
        """A target list: a string is accepted as a one-name list (a quirk of some exports)."""
        if v is None:
            return []
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list):
            self.error(fld, f"is a {_typename(v)}", "a list of names")
            return []
        out = []
        for j, item in enumerate(v):
            if not isinstance(item, str):
                self.error(f"{fld}[{j}]", f"is a {_typename(item)}", "a name string")
                continue
            name = fix_text(item).strip()
            if name:
                out.append(name)
        return out

    def items(self, row: dict, key: str, fld: str) -> list[tuple[str, dict]]:
        v = row.get(key)
        if v is None:
            return []
        if not isinstance(v, list):
            self.error(fld, f"is a {_typename(v)}", "a list of objects")
            return []
        out = []
        for j, item in enumerate(v):
            if not isinstance(item, dict):
                self.error(f"{fld}[{j}]", f"is a {_typename(item)}", "an object")
                continue
            out.append((f"{fld}[{j}]", item))
        return out

    def int_list(self, v: Any, fld: str) -> list[int]:
        if v is None:
            return []
        if not isinstance(v, list):
            self.error(fld, f"is a {_typename(v)}", "a list of row indices")
            return []
        out = []
        for j, x in enumerate(v):
            if isinstance(x, bool) or not isinstance(x, (int, float)) or (isinstance(x, float) and not x.is_integer()):
                self.error(f"{fld}[{j}]", f"{x!r} is not a row index", "an integer")
                continue
            out.append(int(x))
        return out

    # dialogue ------------------------------------------------------------------------------
    def parse(self, obj: Any, sample_id: str | None) -> tuple[Dialogue | None, list[Problem]]:
        from rescue_env.taxonomy.labels import UTTERANCE_TYPES, patterns, strategies

        if not isinstance(obj, dict):
            self.error("record", f"is a JSON {_typename(obj)}", 'an object with a "rows" list')
            return None, self.problems
        sid = sample_id
        if sid is None:
            v = obj.get("sample_id")
            if isinstance(v, str) and v.strip():
                sid = v.strip()
            else:
                self.error("sample_id", "missing" if v is None else f"is a {_typename(v)}", "a non-empty string")
                sid = f"{Path(self.file).stem}:{self.line}"
        rows_v = obj.get("rows")
        if rows_v is None:
            self.error("rows", "missing", "a list of row objects")
            return None, self.problems
        if not isinstance(rows_v, list) or not rows_v:
            what = "is empty" if isinstance(rows_v, list) else f"is a {_typename(rows_v)}"
            self.problems.append(Problem(self.file, self.rows_line, "rows", what, "a non-empty list of row objects"))
            return None, self.problems

        declared = obj.get("participants")
        participants: list[str] = []
        if isinstance(declared, str):
            # "Alan, Evelyn" read as one name would make a phantom member and lose Evelyn
            self.error("participants", f"is a string ({declared[:40]!r})", 'a list of names, e.g. ["Alan", "Evelyn"]')
        elif declared is not None:
            participants = [n for n in self.names(declared, "participants") if n not in NON_CLIENT_NAMES]
        scenario_v = obj.get("scenario")
        scenario: Scenario | None = None
        if scenario_v is not None:
            if isinstance(scenario_v, str) and scenario_v.strip().lower() in GROUP_LABELS:
                scenario = scenario_v.strip().lower()  # type: ignore[assignment]
            else:
                self.error("scenario", f"{scenario_v!r} is not a scenario", "'couple' or 'family'")
        if scenario is None:
            scenario = _infer_scenario(sid, rows_v, participants)
        pattern_set = set(patterns(scenario))
        strategy_set = set(strategies(scenario))

        rows: list[Row] = []
        for i, rv in enumerate(rows_v):
            self.row_i = i
            fld = f"rows[{i}]"
            if not isinstance(rv, dict):
                self.error(fld, f"is a JSON {_typename(rv)}", "a row object")
                continue
            row = self.parse_row(rv, i, fld)
            if row is None:
                continue
            for label_fld, label in (
                ("relation_cycle_state", row.relation_cycle_state),
                ("relation_pattern", row.relation_pattern),
            ):
                # an error by default: the pattern seeds an episode's start state and the fitted
                # transitions, and a label dropped there would start it from another pattern
                if label and label not in pattern_set:
                    report = self.error if self.unknown_patterns == "error" else self.warn
                    report(f"{fld}.{label_fld}", f"unknown {scenario} pattern {label!r}", f"one of {sorted(pattern_set)} or \"\" (no clear pattern)")
            for j, s in enumerate(row.support_strategy):
                if s.strategy_type and s.strategy_type not in strategy_set:
                    self.warn(
                        f"{fld}.support_strategy[{j}].strategy_type",
                        f"unknown {scenario} strategy {s.strategy_type!r}",
                        f"one of {sorted(strategy_set)}",
                    )
            if row.utterance_type and row.utterance_type not in UTTERANCE_TYPES:
                self.warn(f"{fld}.utterance_type", f"unknown utterance type {row.utterance_type!r}", f"one of {list(UTTERANCE_TYPES)} or \"\"")
            rows.append(row)
        self.row_i = -1

        # participants: declared, else inferred in order of first appearance
        people_order: list[str] = []
        spoken: list[str] = []

        def note(name: str, into: list[str]) -> None:
            if name and name not in NON_CLIENT_NAMES and name not in into:
                into.append(name)

        for r in rows:
            note(r.primary_speaker, spoken)
            note(r.primary_speaker, people_order)
            for t in r.target:
                note(t, people_order)
            for s in r.support_strategy:
                for t in s.target:
                    note(t, people_order)
            for e in r.internal_emotion:
                note(e.person, people_order)
        if declared is None or isinstance(declared, str):  # a string is already an error
            participants = list(people_order)
        else:
            for name in spoken:
                if name not in participants:
                    # an error: the simulated group would lack a member who speaks in its history
                    self.error("participants", f"speaker {name!r} is not listed", "every client who speaks listed in participants")
        mentioned: list[str] = []
        for r in rows:
            for v in r.viewpoints_attitudes:
                note(v.source, mentioned)
                note(v.target, mentioned)
            for name in people_order:
                note(name, mentioned)
        mentioned = [m for m in mentioned if m not in participants]
        if not participants:
            self.error("participants", "no client found", "at least one client speaker or a participants list")

        has_errors = any(p.severity == "error" for p in self.problems)
        if has_errors:
            return None, self.problems
        extras = {k: v for k, v in obj.items() if k not in DIALOGUE_KEYS and k != "mentioned"}
        source_file = obj.get("source_file") if isinstance(obj.get("source_file"), str) else ""
        dialogue = Dialogue(
            sample_id=sid,
            scenario=scenario,
            participants=participants,
            rows=rows,
            source_file=source_file or "",
            mentioned=mentioned,
            origin=(self.file, self.line),
            extras=extras,
            raw=obj,
        )
        return dialogue, self.problems

    # row -----------------------------------------------------------------------------------
    def parse_row(self, rv: dict, i: int, fld: str) -> Row | None:
        speaker_v = rv.get("primary_speaker")
        if speaker_v is None or (isinstance(speaker_v, str) and not speaker_v.strip()):
            self.error(f"{fld}.primary_speaker", "missing" if speaker_v is None else "empty", f'"{THERAPIST}" or a client name')
            return None
        if not isinstance(speaker_v, str):
            self.error(f"{fld}.primary_speaker", f"is a {_typename(speaker_v)}", f'"{THERAPIST}" or a client name')
            return None
        ri = rv.get("row_index", i + 1)
        if isinstance(ri, bool) or not isinstance(ri, (int, float)) or (isinstance(ri, float) and not ri.is_integer()):
            self.error(f"{fld}.row_index", f"{ri!r} is not an integer", "a 1-based row number")
            ri = i + 1

        row = Row(
            row_index=int(ri),
            primary_speaker=fix_text(speaker_v).strip(),
            start_time=self.number(rv.get("start_time"), f"{fld}.start_time", required=False),
            end_time=self.number(rv.get("end_time"), f"{fld}.end_time", required=False),
            target=self.names(rv.get("target"), f"{fld}.target"),
            dialogue_cleaned=self.text(rv, "dialogue_cleaned", f"{fld}.dialogue_cleaned"),
            utterance_type=self.text(rv, "utterance_type", f"{fld}.utterance_type"),
            tone_of_voice=self.text(rv, "tone_of_voice", f"{fld}.tone_of_voice"),
            relation_cycle_state=self.opt_label(rv, "relation_cycle_state", f"{fld}.relation_cycle_state"),
            relation_cycle_reason=self.opt_text(rv, "relation_cycle_reason", f"{fld}.relation_cycle_reason"),
            relation_cycle_evidence_rows=(
                self.int_list(rv.get("relation_cycle_evidence_rows"), f"{fld}.relation_cycle_evidence_rows")
                if "relation_cycle_evidence_rows" in rv
                else None
            ),
            relation_pattern=self.opt_label(rv, "relation_pattern", f"{fld}.relation_pattern"),
            relation_pattern_reason=self.opt_text(rv, "relation_pattern_reason", f"{fld}.relation_pattern_reason"),
            relation_pattern_evidence_rows=self.int_list(rv.get("relation_pattern_evidence_rows"), f"{fld}.relation_pattern_evidence_rows"),
            extras={k: v for k, v in rv.items() if k not in ROW_KEYS},
            raw=rv,
        )
        for key in ("body_posture", "facial_expressions", "self_directed_behavior"):
            target_list = getattr(row, key)
            for f2, it in self.items(rv, key, f"{fld}.{key}"):
                target_list.append(PersonDescription(self.text(it, "person", f"{f2}.person"), self.text(it, "description", f"{f2}.description")))
        for f2, it in self.items(rv, "interaction_behavior", f"{fld}.interaction_behavior"):
            row.interaction_behavior.append(
                InteractionBehavior(
                    self.text(it, "initiator", f"{f2}.initiator"),
                    self.names(it.get("target"), f"{f2}.target"),
                    self.text(it, "description", f"{f2}.description"),
                )
            )
        for f2, it in self.items(rv, "background_dialogue", f"{fld}.background_dialogue"):
            row.background_dialogue.append(
                BackgroundUtterance(
                    self.text(it, "speaker", f"{f2}.speaker"),
                    self.names(it.get("target"), f"{f2}.target"),
                    self.text(it, "content", f"{f2}.content"),
                )
            )
        for f2, it in self.items(rv, "internal_emotion", f"{fld}.internal_emotion"):
            intensity = self.number(it.get("intensity"), f"{f2}.intensity", required=True)
            if intensity is not None and not 1 <= intensity <= 10:
                self.error(f"{f2}.intensity", f"{it.get('intensity')!r} is outside 1-10", "a number from 1 to 10")
                intensity = None
            person = self.text(it, "person", f"{f2}.person")
            if not person:
                self.error(f"{f2}.person", "missing", "the name of the person who feels it")
            if intensity is not None:
                row.internal_emotion.append(EmotionRecord(person, self.text(it, "emotion_description", f"{f2}.emotion_description"), intensity))
        for f2, it in self.items(rv, "viewpoints_attitudes", f"{fld}.viewpoints_attitudes"):
            row.viewpoints_attitudes.append(
                ViewpointRecord(
                    self.text(it, "source", f"{f2}.source"),
                    self.text(it, "target", f"{f2}.target") if not isinstance(it.get("target"), list) else ", ".join(self.names(it.get("target"), f"{f2}.target")),
                    self.text(it, "viewpoint", f"{f2}.viewpoint"),
                    self.text(it, "attitude", f"{f2}.attitude"),
                )
            )
        for f2, it in self.items(rv, "support_strategy", f"{fld}.support_strategy"):
            row.support_strategy.append(
                StrategyRecord(
                    self.text(it, "provider", f"{f2}.provider") or THERAPIST,
                    self.names(it.get("target"), f"{f2}.target"),
                    self.text(it, "strategy_type", f"{f2}.strategy_type"),
                    self.text(it, "strategy_content", f"{f2}.strategy_content"),
                )
            )
        return row


def _infer_scenario(sample_id: str, rows: list, participants: list[str]) -> Scenario:
    """``family`` when the sample id names ``family_therapy`` or any target says ``Family``,
    or more than two clients take part; ``couple`` otherwise."""
    sid = sample_id.lower()
    if sid.startswith("family_therapy/") or "/family_therapy/" in sid:
        return "family"
    for r in rows:
        if not isinstance(r, dict):
            continue
        targets = r.get("target") if isinstance(r.get("target"), list) else [r.get("target")]
        if "Family" in targets or r.get("primary_speaker") == "Family":
            return "family"
        for s in r.get("support_strategy") or []:
            if isinstance(s, dict) and isinstance(s.get("target"), list) and "Family" in s["target"]:
                return "family"
    if len(participants) > 2:
        return "family"
    return "couple"
