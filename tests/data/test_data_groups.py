"""Group sizes against what an env holds (no member dropped silently), several data paths
read as one data set, and their provenance; on the second real slice (skipped without
``../shared``) and on hand-made files."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from rescue_env.data import (
    DataValidationError,
    GroupSizeError,
    check_group_sizes,
    data_sources,
    group_cap,
    load_dialogues,
    oversized_groups,
    resolve_data_paths,
    validate,
)
from rescue_env.data.schema import THERAPIST

THREE = "aryn_josh_and_lorena/009_s04e09_ct34_segment04"


def _write(path: Path, *records: dict) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _couple(sample_id: str, *people: str, scenario: str = "couple") -> dict:
    rows = [{"primary_speaker": p, "target": [THERAPIST], "dialogue_cleaned": f"I am {p}."} for p in people]
    return {"sample_id": sample_id, "scenario": scenario, "participants": list(people), "rows": rows}


# --- the second slice -----------------------------------------------------------------------


def test_second_slice_validates_with_a_group_size_warning(real_more_path, run_cli):
    res = run_cli("data", "validate", real_more_path)
    assert res.rc == 0, res.err
    assert f"{real_more_path}: 5 dialogues, 184 rows" in res.out
    assert "couple: 5 dialogues, 184 rows (2 members × 4, 3 members × 1)" in res.out
    # the warning says what each consumer does with the three-partner couple
    (line,) = [x for x in res.out.splitlines() if "participants:" in x]
    assert f"{real_more_path}:2: participants:" in line and THREE in line and "3 members (Lorena, Aryn, Josh)" in line
    assert "env.max_members>=3" in line and "calibrate" in line
    # a property of the env, not of the data: --strict keeps it a warning
    assert run_cli("data", "validate", real_more_path, "--strict").rc == 0


def test_three_partner_couple_is_refused_by_name_never_cut(real_more_dialogues, three_partner_couple):
    with pytest.raises(GroupSizeError) as err:
        check_group_sizes(real_more_dialogues)  # the couple env's default: 2 members
    (problem,) = err.value.problems
    msg = str(err.value)
    assert THREE in msg and "has 3 members (Lorena, Aryn, Josh)" in msg and "env.max_members=3" in msg
    assert problem.line == 2 and problem.file.endswith("benchmark_more.jsonl")
    assert isinstance(err.value, DataValidationError)  # callers catching data errors catch it too
    assert three_partner_couple.participants == ["Lorena", "Aryn", "Josh"]  # the check changes nothing
    check_group_sizes(real_more_dialogues, 3)
    check_group_sizes(real_more_dialogues, {"couple": 3})
    assert oversized_groups([d for d in real_more_dialogues if d.sample_id != THREE]) == []


# --- the check on hand-made groups ----------------------------------------------------------


def test_caps_per_scenario():
    assert (group_cap("couple"), group_cap("family")) == (2, 6)
    assert group_cap("family", 4) == 4 and group_cap("couple", {"family": 4}) == 2


def test_family_larger_than_the_cap_is_an_error(tmp_path, seed_dialogues):
    big = max((d for d in seed_dialogues if d.scenario == "family"), key=lambda d: len(d.participants))
    n = len(big.participants)
    check_group_sizes(seed_dialogues)  # the bundled seeds fit the default envs
    with pytest.raises(GroupSizeError, match=rf"family sample '{big.sample_id}' has {n} members .* at most {n - 1} \(env.max_members={n - 1}\)"):
        check_group_sizes(seed_dialogues, n - 1)
    # a custom remedy replaces the advice, the message still names sample and size
    with pytest.raises(GroupSizeError, match=rf"has {n} members.*\(retrain it\)"):
        check_group_sizes([big], n - 1, remedy="retrain it")


# --- several paths --------------------------------------------------------------------------


def test_a_list_of_paths_is_one_data_set(tmp_path):
    a = _write(tmp_path / "a.jsonl", _couple("a/1", "Ana", "Ben"))
    b = _write(tmp_path / "b.jsonl", _couple("b/1", "Cy", "Di"), _couple("b/2", "Ed", "Flo"))
    got = load_dialogues([a, str(b)])
    assert [d.sample_id for d in got] == ["a/1", "b/1", "b/2"]
    assert validate([a, b]).path == f"{a}, {b}"
    with pytest.raises(ValueError, match="empty list"):
        load_dialogues([])


def test_a_directory_of_jsonl_files_reads_them_all(tmp_path):
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    _write(tmp_path / "two" / "x.jsonl", _couple("x/1", "Cy", "Di"))
    _write(tmp_path / "one" / "y.jsonl", _couple("y/1", "Ana", "Ben"))
    (tmp_path / "one" / "README.md").write_text("not data", encoding="utf-8")
    assert resolve_data_paths(tmp_path) == [tmp_path / "one" / "y.jsonl", tmp_path / "two" / "x.jsonl"]
    assert [d.sample_id for d in load_dialogues(tmp_path)] == ["y/1", "x/1"]


def test_a_sample_id_in_two_paths_is_a_duplicate(tmp_path):
    a = _write(tmp_path / "a.jsonl", _couple("same/1", "Ana", "Ben"))
    b = _write(tmp_path / "b.jsonl", _couple("same/1", "Cy", "Di"))
    with pytest.raises(DataValidationError) as err:
        load_dialogues([a, b])
    (p,) = err.value.problems
    assert p.file == str(b) and p.field == "sample_id" and f"first at {a}:1" in p.message


def test_a_directory_mixing_layouts_is_an_error(tmp_path):
    _write(tmp_path / "a.jsonl", _couple("a/1", "Ana", "Ben"))
    (tmp_path / "b.json").write_text(json.dumps(_couple("b", "Cy", "Di")), encoding="utf-8")
    with pytest.raises(DataValidationError, match="both .jsonl files and per-sample .json files"):
        load_dialogues(tmp_path)


def test_the_real_slices_load_together(real_subset_path, real_more_path, real_extra_path):
    slices = [real_subset_path, real_more_path, real_extra_path]
    together = load_dialogues(slices)
    assert len(together) == sum(len(load_dialogues(s)) for s in slices) == len({d.sample_id for d in together})
    shared_dir = real_more_path.parents[1]  # ../shared/data: one slice per subfolder
    assert sorted(d.sample_id for d in load_dialogues(shared_dir)) == sorted(d.sample_id for d in together)


# --- provenance -----------------------------------------------------------------------------


def test_data_sources_hash_each_file_and_count_its_dialogues(tmp_path, seeds_path):
    a = _write(tmp_path / "a.jsonl", _couple("a/1", "Ana", "Ben"))
    b = _write(tmp_path / "b.jsonl", _couple("b/1", "Cy", "Di"), _couple("b/2", "Ed", "Flo"))
    ds = load_dialogues([None, a, b])
    got = data_sources([None, a, b], ds)
    assert [s["path"] for s in got] == ["rescue_env/data/seeds", str(a), str(b)]
    assert [s["dialogues"] for s in got] == [len(ds) - 3, 1, 2]
    assert got[1]["sha256"] == hashlib.sha256(a.read_bytes()).hexdigest()
    # a per-sample directory's hash follows its content
    copy = tmp_path / "seeds"
    shutil.copytree(seeds_path, copy)
    assert data_sources(copy)[0]["sha256"] == got[0]["sha256"]
    victim = sorted(copy.rglob("*.json"))[0]
    victim.write_text(victim.read_text(encoding="utf-8") + " ", encoding="utf-8")
    assert data_sources(copy)[0]["sha256"] != got[0]["sha256"]
