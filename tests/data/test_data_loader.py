"""Loading RESCUE-BENCH dialogues: the real subset (JSON Lines and a per-sample directory
built from it), the bundled seeds, participant inference, people outside ``participants``,
mis-decoded punctuation and the ``write_jsonl`` round trip."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rescue_env.data import (
    THERAPIST,
    Dialogue,
    DataValidationError,
    Row,
    bundled_seeds_path,
    fix_text,
    load_dialogues,
    parse_dialogue,
    resolve_data_path,
    validate,
    write_jsonl,
)

MOJIBAKE = "\u00e2\u0080"  # "â" + C1 control: UTF-8 punctuation read as Latin-1
SAMPLE_002 = "alan_and_evelyn/002_s01e02_ct81_segment01"
SAMPLE_003 = "alan_and_evelyn/003_s01e02_ct81_segment02"
SAMPLE_004 = "alan_and_evelyn/004_s01e04_ct78_segment01"
FAMILY = "family_therapy/003/merged"


def by_id(dialogues: list[Dialogue]) -> dict[str, Dialogue]:
    return {d.sample_id: d for d in dialogues}


def row(d: Dialogue, row_index: int) -> Row:
    (r,) = [r for r in d.rows if r.row_index == row_index]
    return r


def strings(obj: Any) -> list[str]:
    """Every string inside a JSON-like object (keys excluded)."""
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in strings(v)]
    return []


# --- the real subset, JSON Lines ------------------------------------------------------------


def test_real_subset_counts(real_dialogues, real_records):
    assert len(real_dialogues) == 10
    assert Counter(d.scenario for d in real_dialogues) == {"couple": 9, "family": 1}
    assert sum(len(d.rows) for d in real_dialogues) == 337
    # one dialogue per line, in file order, every row kept
    assert [d.sample_id for d in real_dialogues] == [r["sample_id"] for r in real_records]
    assert [len(d.rows) for d in real_dialogues] == [len(r["rows"]) for r in real_records]
    assert [d.origin[1] for d in real_dialogues] == list(range(1, 11))


def test_real_subset_participants_kept_in_declared_order(real_dialogues):
    d = by_id(real_dialogues)
    assert d[FAMILY].participants == ["Maria", "Joel", "Laura"]
    assert d[FAMILY].scenario == "family" and d[FAMILY].group_label == "Family"
    assert d["alan_and_evelyn/001_s01e01_ct25_segment04"].participants == ["Alan", "Evelyn"]
    # the order varies between samples of the same couple and is kept as given
    assert d["alan_and_evelyn/008_s01e09_ct04_segment01"].participants == ["Evelyn", "Alan"]
    assert d["alexes_and_casimar/001_s03e04_ct09_segment07"].participants == ["Casimar", "Alexes"]
    for dlg in real_dialogues:
        assert THERAPIST not in dlg.participants
        assert dlg.mentioned == []


def test_real_rows_carry_every_published_field(real_dialogues):
    """A row exported again equals the published object; only fields holding non-ASCII text
    (the mis-decoded punctuation) may differ."""
    identical = 0
    for d in real_dialogues:
        for r in d.rows:
            exported = r.to_dict()
            assert exported.keys() == r.raw.keys(), (d.sample_id, r.row_index)
            for key in r.raw:
                if exported[key] != r.raw[key]:
                    assert not json.dumps(r.raw[key], ensure_ascii=False).isascii(), (d.sample_id, r.row_index, key)
            identical += exported == r.raw
    assert identical > 300


def test_correct_text_is_not_rewritten(real_dialogues):
    r = row(by_id(real_dialogues)["alexes_and_casimar/001_s03e04_ct09_segment07"], 18)
    published = r.raw["support_strategy"][0]["strategy_content"]
    assert "client\u2019s" in published
    assert r.support_strategy[0].strategy_content == published.strip()


def test_relation_label_null_and_empty_kept_distinct(real_dialogues, real_records):
    nulls = empties = 0
    for d, rec in zip(real_dialogues, real_records):
        for r, raw in zip(d.rows, rec["rows"]):
            assert r.relation_pattern == raw.get("relation_pattern")
            assert r.relation_cycle_state == raw.get("relation_cycle_state")
            nulls += r.relation_pattern is None
            empties += r.relation_pattern == ""
    assert nulls > 0 and empties > 0
    d = by_id(real_dialogues)
    first = d["alan_and_evelyn/001_s01e01_ct25_segment04"].rows[0]
    assert first.relation_pattern is None and first.relation_label is None  # not annotated
    no_clear = row(d[SAMPLE_002], 3)
    assert no_clear.relation_pattern == "" and no_clear.relation_label == ""  # annotated: no clear pattern


def test_relation_label_prefers_cycle_state_on_therapist_rows(real_dialogues):
    d = by_id(real_dialogues)
    therapist = row(d[SAMPLE_003], 25)
    assert therapist.is_therapist
    assert (therapist.relation_cycle_state, therapist.relation_pattern) == ("pursue_withdraw", "mixed_transition")
    assert therapist.relation_label == "pursue_withdraw"
    client = row(d["alan_and_evelyn/001_s01e01_ct25_segment04"], 2)
    assert client.primary_speaker == "Alan" and client.relation_cycle_state is None
    assert client.relation_label == "attack_attack"


@pytest.mark.parametrize(
    ("speaker", "cycle", "pattern", "label"),
    [
        (THERAPIST, "pursue_withdraw", "attack_attack", "pursue_withdraw"),
        ("Ana", "pursue_withdraw", "attack_attack", "attack_attack"),
        (THERAPIST, None, "attack_attack", "attack_attack"),  # preferred field absent: fall back
        ("Ana", "withdraw_withdraw", None, "withdraw_withdraw"),
        (THERAPIST, None, None, None),
        ("Ana", None, "", ""),
        (THERAPIST, "", None, ""),
    ],
)
def test_relation_label_rules(speaker, cycle, pattern, label):
    r = Row(row_index=1, primary_speaker=speaker, relation_cycle_state=cycle, relation_pattern=pattern)
    assert r.relation_label == label


def test_dyad_and_group_targets_are_name_lists(real_dialogues):
    d = by_id(real_dialogues)
    couple_dyad = row(d[SAMPLE_004], 16)
    assert couple_dyad.is_therapist
    assert couple_dyad.target == ["Evelyn", "Alan"]
    assert couple_dyad.support_strategy[0].target == ["Evelyn", "Alan"]
    family_dyad = row(d[FAMILY], 64)
    assert family_dyad.target == ["Maria", "Joel"]
    assert row(d[SAMPLE_004], 1).target == ["Couple"]
    assert row(d[FAMILY], 1).target == ["Family"]
    assert d["alan_and_evelyn/001_s01e01_ct25_segment04"].rows[0].target == [THERAPIST]
    for dlg in real_dialogues:
        for r in dlg.rows:
            assert isinstance(r.target, list) and all(isinstance(t, str) and t for t in r.target)


def test_mojibake_repaired_raw_kept(real_dialogues, real_subset_path):
    published = real_subset_path.read_text(encoding="utf-8")
    assert MOJIBAKE in published  # the quirk is really there
    r = row(by_id(real_dialogues)[SAMPLE_002], 3)
    assert "Evelyn\u2019s" in r.relation_pattern_reason or "Evelyn's" in r.relation_pattern_reason
    assert MOJIBAKE not in r.relation_pattern_reason
    assert "Evelyn\u00e2\u0080\u0099s" in r.raw["relation_pattern_reason"]  # published text kept
    for dlg in real_dialogues:
        for rr in dlg.rows:
            for s in strings(rr.to_dict()):
                assert MOJIBAKE not in s, (dlg.sample_id, rr.row_index, s)


@pytest.mark.parametrize(
    ("broken", "repaired"),
    [
        ("Evelyn\u00e2\u0080\u0099s", ("Evelyn\u2019s", "Evelyn's")),
        ("wait \u00e2\u0080\u0094 no", ("wait \u2014 no",)),
        ("plain ASCII, untouched", ("plain ASCII, untouched",)),
        ("caf\u00e9 already fine", ("caf\u00e9 already fine",)),
    ],
)
def test_fix_text(broken, repaired):
    assert fix_text(broken) in repaired


# --- directory layout -----------------------------------------------------------------------


def write_directory(root: Path, records: list[dict[str, Any]]) -> None:
    for rec in records:
        f = root / f"{rec['sample_id']}.json"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(rec, indent=1, ensure_ascii=False), encoding="utf-8")


def test_directory_layout_from_real_records(tmp_path, real_records, real_dialogues):
    root = tmp_path / "bench"
    write_directory(root, real_records)
    # manifests are skipped wherever they are, even when they are not dialogues
    (root / "manifest.json").write_text(json.dumps({"samples": [r["sample_id"] for r in real_records]}))
    (root / "family_therapy" / "manifest.json").write_text("not JSON at all")
    loaded = by_id(load_dialogues(root))
    assert sorted(loaded) == sorted(d.sample_id for d in real_dialogues)
    assert FAMILY in loaded  # sample_id = relative path without suffix
    for d in real_dialogues:
        got = loaded[d.sample_id]
        assert got.scenario == d.scenario
        assert got.participants == d.participants
        assert got.origin[0] == str(root / f"{d.sample_id}.json")
        assert [r.to_dict() for r in got.rows] == [r.to_dict() for r in d.rows]


def test_directory_sample_id_is_the_relative_path(tmp_path, real_records):
    """The path wins over a ``sample_id`` stored inside the file."""
    rec = dict(real_records[-1], sample_id="something/else")
    f = tmp_path / "root" / "family_therapy" / "003" / "merged.json"
    f.parent.mkdir(parents=True)
    f.write_text(json.dumps(rec, indent=1), encoding="utf-8")
    (d,) = load_dialogues(tmp_path / "root")
    assert d.sample_id == "family_therapy/003/merged"
    (single,) = load_dialogues(f)  # one file: its stem
    assert single.sample_id == "merged" and len(single.rows) == 112


# --- bundled seeds --------------------------------------------------------------------------


def test_seeds_are_the_default(seed_dialogues, seeds_path):
    assert resolve_data_path(None) == seeds_path == bundled_seeds_path()
    assert resolve_data_path("") == seeds_path
    again = load_dialogues(seeds_path)
    assert [d.to_dict() for d in again] == [d.to_dict() for d in seed_dialogues]


def test_seeds_shape(seed_dialogues, seed_records):
    by_scn = Counter(d.scenario for d in seed_dialogues)
    assert by_scn["couple"] >= 6 and by_scn["family"] >= 3
    assert sorted(d.sample_id for d in seed_dialogues) == sorted(seed_records)
    for d in seed_dialogues:
        assert 20 <= len(d.rows) <= 60, d.sample_id
        if d.scenario == "couple":
            assert len(d.participants) == 2, d.sample_id
        else:
            assert 3 <= len(d.participants) <= 5, d.sample_id
        assert d.participants == seed_records[d.sample_id]["participants"]
    family_sizes = {len(d.participants) for d in seed_dialogues if d.scenario == "family"}
    assert {3, 4, 5} <= family_sizes


def test_seed_row_indices_are_consecutive(seed_dialogues):
    for d in seed_dialogues:
        assert [r.row_index for r in d.rows] == list(range(1, len(d.rows) + 1)), d.sample_id


def test_people_outside_participants_are_mentioned(seed_dialogues):
    d = by_id(seed_dialogues)["family_therapy/f01_school_refusal"]
    assert d.participants == ["Helen", "Joan", "Kieran"]
    assert "Marek" in d.mentioned and "Marek" not in d.participants
    assert any(v.target == "Marek" for r in d.rows for v in r.viewpoints_attitudes)
    for dlg in seed_dialogues:
        assert not set(dlg.mentioned) & set(dlg.participants)
        assert THERAPIST not in dlg.mentioned and dlg.group_label not in dlg.mentioned


# --- participants inferred when absent ------------------------------------------------------


def test_participants_inferred_from_real_records(real_records):
    for rec in real_records:
        stripped = {k: v for k, v in rec.items() if k != "participants"}
        d, problems = parse_dialogue(stripped)
        assert d is not None and problems == []
        assert sorted(d.participants) == sorted(rec["participants"]), rec["sample_id"]
        assert d.scenario == rec["scenario"]


def test_participants_inferred_seed_keeps_mentioned_apart(seed_records):
    rec = {k: v for k, v in seed_records["family_therapy/f01_school_refusal"].items() if k != "participants"}
    d, problems = parse_dialogue(rec, sample_id="family_therapy/f01_school_refusal")
    assert [p for p in problems if p.severity == "error"] == []
    assert sorted(d.participants) == ["Helen", "Joan", "Kieran"]
    assert d.mentioned == ["Marek"]


def test_participants_inferred_in_order_of_first_appearance(tmp_path):
    rows = [
        {"primary_speaker": THERAPIST, "target": ["Ben"], "dialogue_cleaned": "Ben, go on."},
        {"primary_speaker": "Ben", "target": ["Ana"], "dialogue_cleaned": "She never listens."},
        {"primary_speaker": "Ana", "target": ["Couple"], "dialogue_cleaned": "That is not fair."},
    ]
    f = tmp_path / "no_participants.jsonl"
    f.write_text(json.dumps({"sample_id": "x/1", "scenario": "couple", "rows": rows}) + "\n", encoding="utf-8")
    (d,) = load_dialogues(f)
    assert d.participants == ["Ben", "Ana"]
    assert [r.row_index for r in d.rows] == [1, 2, 3]  # row_index defaults to position


def test_speaker_missing_from_participants_is_an_error(tmp_path, run_cli):
    # the simulated group would lack a member who speaks in its history
    rows = [
        {"primary_speaker": "Ana", "target": ["Ben"], "dialogue_cleaned": "Hi."},
        {"primary_speaker": "Cleo", "target": ["Ana"], "dialogue_cleaned": "Me too."},
    ]
    f = tmp_path / "extra_speaker.jsonl"
    f.write_text(
        json.dumps({"sample_id": "x/1", "scenario": "couple", "participants": ["Ana", "Ben"], "rows": rows}) + "\n",
        encoding="utf-8",
    )
    report = validate(f)
    assert not report.ok and [(p.line, p.field) for p in report.errors] == [(1, "participants")]
    assert "'Cleo' is not listed" in str(report.errors[0])
    with pytest.raises(DataValidationError):
        load_dialogues(f)
    res = run_cli("data", "validate", str(f))
    assert res.rc == 2 and "'Cleo' is not listed" in res.err


def test_participants_as_one_string_is_an_error(tmp_path, run_cli):
    # "Alan, Evelyn" read as one name made a phantom member and dropped Evelyn
    rows = [
        {"primary_speaker": "Alan", "target": ["Evelyn"], "dialogue_cleaned": "Hi."},
        {"primary_speaker": "Evelyn", "target": ["Alan"], "dialogue_cleaned": "Hello."},
    ]
    f = tmp_path / "string_participants.jsonl"
    f.write_text(json.dumps({"sample_id": "x/1", "scenario": "couple", "participants": "Alan, Evelyn", "rows": rows}) + "\n")
    report = validate(f)
    assert not report.ok and [(p.line, p.field) for p in report.errors] == [(1, "participants")]
    assert "is a string" in str(report.errors[0])


# --- round trip -----------------------------------------------------------------------------


def test_write_jsonl_round_trip_real(tmp_path, real_dialogues):
    out = write_jsonl(real_dialogues, tmp_path / "out" / "bench.jsonl")
    assert len(out.read_text(encoding="utf-8").splitlines()) == 10
    again = load_dialogues(out)
    assert [d.to_dict() for d in again] == [d.to_dict() for d in real_dialogues]
    assert [d.participants for d in again] == [d.participants for d in real_dialogues]
    # exporting again is stable
    out2 = write_jsonl(again, tmp_path / "again.jsonl")
    assert out2.read_bytes() == out.read_bytes()


def test_write_jsonl_round_trip_seeds(tmp_path, seed_dialogues):
    again = load_dialogues(write_jsonl(seed_dialogues, tmp_path / "seeds.jsonl"))
    assert [d.sample_id for d in again] == [d.sample_id for d in seed_dialogues]
    assert [d.to_dict() for d in again] == [d.to_dict() for d in seed_dialogues]
    assert [d.mentioned for d in again] == [d.mentioned for d in seed_dialogues]


# --- gzip JSON Lines: a user's .jsonl.gz, a run's episodes file ---------------------------------


def test_a_gzip_dataset_loads_like_the_plain_one(tmp_path, seed_dialogues, run_cli):
    import gzip

    plain = write_jsonl(seed_dialogues, tmp_path / "seeds.jsonl")
    by_tool = tmp_path / "seeds.jsonl.gz"
    by_tool.write_bytes(gzip.compress(plain.read_bytes()))  # `gzip seeds.jsonl`: one member
    unnamed = tmp_path / "renamed.jsonl"
    unnamed.write_bytes(by_tool.read_bytes())  # gzip is told by the bytes, not by the name
    want = [d.to_dict() for d in load_dialogues(plain)]
    for path in (by_tool, unnamed, write_jsonl(seed_dialogues, tmp_path / "written.jsonl.gz")):
        assert [d.to_dict() for d in load_dialogues(path)] == want, path
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "part.jsonl.gz").write_bytes(by_tool.read_bytes())
    assert [d.to_dict() for d in load_dialogues(folder)] == want  # a directory's .jsonl.gz files are read
    assert run_cli("data", "validate", by_tool).rc == 0
    (folder / "part.jsonl").write_bytes(plain.read_bytes())  # the same records, plain, beside it
    both = run_cli("data", "validate", folder)
    assert both.rc == 2 and f"{folder} holds both part.jsonl.gz and part.jsonl" in both.err


def test_a_gzip_dataset_names_its_problems_by_decompressed_line(tmp_path, seed_records):
    import gzip

    records = [json.loads(json.dumps(r)) for r in seed_records.values()][:3]
    records[2]["participants"] = "Alan, Evelyn"
    path = tmp_path / "bad.jsonl.gz"
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode()))
    report = validate(path)
    assert [(p.file, p.line, p.field) for p in report.errors] == [(str(path), 3, "participants")]


def test_a_cut_gzip_dataset_is_an_error_naming_the_line(tmp_path, seed_dialogues):
    path = write_jsonl(seed_dialogues[:4], tmp_path / "cut.jsonl.gz")
    path.write_bytes(path.read_bytes()[:-10])  # the last member lost its end
    with pytest.raises(DataValidationError) as err:
        load_dialogues(path)
    (problem,) = err.value.problems
    assert problem.line == 4 and "ends inside the gzip member" in problem.message


def test_round_trip_keeps_extra_keys(tmp_path, seed_records):
    records = []
    for sid, rec in seed_records.items():
        rec = json.loads(json.dumps(rec))
        rec["sample_id"] = sid
        rec["episode"] = {"seed": 7}
        for k, r in enumerate(rec["rows"]):
            r["state"] = {"distress": [0.1 * (k % 10), 0.5], "pattern": None}
        records.append(rec)
    src = tmp_path / "episodes.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    loaded = load_dialogues(src)
    for d, rec in zip(loaded, records):
        assert d.extras == {"episode": {"seed": 7}}
        assert [r.extras for r in d.rows] == [{"state": r["state"]} for r in rec["rows"]]
    written = write_jsonl(loaded, tmp_path / "back.jsonl")
    back = load_dialogues(written)
    assert [d.to_dict() for d in back] == [d.to_dict() for d in loaded]
    first = json.loads(written.read_text(encoding="utf-8").splitlines()[0])
    assert first["episode"] == {"seed": 7}
    assert first["rows"][3]["state"] == records[0]["rows"][3]["state"]
