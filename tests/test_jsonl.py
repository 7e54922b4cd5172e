"""The one JSON Lines reader: a line ends at "\\n" only, so the whole of JSON is accepted
(U+2028, U+2029 and U+0085 raw inside strings, as ``json.dumps(..., ensure_ascii=False)``
writes them), line numbers count "\\n"s, and nothing non-JSON is ever written. Gzip files
(told by their first bytes) read the same, and a cut one names where it is cut."""

from __future__ import annotations

import gzip
import json
import math

import pytest

from rescue_env.jsonl import (
    GZIP_MAGIC, JsonlError, decode, dumps, encode_line, encode_lines, finite_or_null, read_objects, split_lines,
)

SEPARATORS = ["\u2028", "\u2029", "\u0085"]


@pytest.mark.parametrize("sep", SEPARATORS, ids=["U+2028", "U+2029", "U+0085"])
def test_a_line_separator_inside_a_string_stays_in_its_line(tmp_path, sep):
    objs = [{"reply": f"first{sep}second"}, {"n": 2}, {"reply": f"a{sep}{sep}b"}]
    path = tmp_path / "x.jsonl"
    path.write_text("".join(dumps(o) + "\n" for o in objs), encoding="utf-8")
    assert sep in path.read_text(encoding="utf-8")  # written raw, not escaped
    assert list(read_objects(path)) == [(1, objs[0]), (2, objs[1]), (3, objs[2])]


def test_line_numbers_count_newlines_only(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text(dumps({"a": "x\u2028y\u0085z"}) + "\n\n" + dumps({"b": 1}) + "\n{broken\n", encoding="utf-8")
    with pytest.raises(JsonlError) as err:
        list(read_objects(path))
    assert err.value.line == 4 and str(err.value).startswith(f"{path}:4: not valid JSON")


def test_split_lines_final_newline_and_crlf():
    assert split_lines('{"a": 1}\n{"b": 2}\n') == ['{"a": 1}', '{"b": 2}']
    assert split_lines('{"a": 1}\r\n{"b": 2}') == ['{"a": 1}\r', '{"b": 2}']
    assert [json.loads(x) for x in split_lines('{"a": 1}\r\n')] == [{"a": 1}]


def test_not_utf8_names_the_line(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": "\xff"}\n')
    with pytest.raises(JsonlError, match=r":2: not UTF-8"):
        list(read_objects(path))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_dumps_refuses_non_finite_numbers(bad):
    with pytest.raises(ValueError):
        dumps({"sigma_return": bad})


def test_finite_or_null_turns_undefined_figures_into_null():
    import numpy as np

    fig = {"mean": 1.5, "ci95": math.nan, "pairs": [math.inf, 2.0], "n": np.float64("nan"), "k": np.int64(3)}
    assert dumps(finite_or_null(fig)) == '{"mean": 1.5, "ci95": null, "pairs": [null, 2.0], "n": null, "k": 3}'


# ---------------------------------------------------------------------------------------------
# gzip: told by the magic bytes, read member by member, a cut tail reported by line


def _gz_file(path, objs):
    path.write_bytes(encode_lines([dumps(o) for o in objs], compress=True))
    return path


def test_gzip_file_reads_like_the_plain_one_whatever_its_name(tmp_path):
    objs = [{"reply": "a\u2028b"}, {"n": 2}, {"reply": "x\u0085y"}]
    gz = _gz_file(tmp_path / "named.jsonl", objs)  # no .gz in the name: the bytes tell
    assert gz.read_bytes().startswith(GZIP_MAGIC)
    assert gzip.decompress(gz.read_bytes()) == "".join(dumps(o) + "\n" for o in objs).encode()  # one member per line
    assert list(read_objects(gz)) == [(1, objs[0]), (2, objs[1]), (3, objs[2])]


def test_a_whole_file_gzip_made_by_gzip_itself_reads(tmp_path):
    path = tmp_path / "d.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"a": 1}\n\n{"b": 2}\n'))
    assert list(read_objects(path)) == [(1, {"a": 1}), (3, {"b": 2})]


def test_a_gzip_file_cut_inside_its_last_member_names_the_line_after_the_whole_ones(tmp_path):
    path = _gz_file(tmp_path / "x.jsonl.gz", [{"i": i, "text": "w" * 500} for i in range(4)])
    path.write_bytes(path.read_bytes()[:-7])  # a killed write: the last member lacks its CRC
    with pytest.raises(JsonlError) as err:
        list(read_objects(path))
    assert err.value.line == 4 and "ends inside the gzip member" in err.value.message and "3 lines before it are whole" in err.value.message
    decoded = decode(path.read_bytes())
    assert decoded.cut and decoded.data.count(b"\n") == 3 and len(decoded.members) == 3


def test_a_corrupt_member_and_trailing_junk_are_cut_points(tmp_path):
    lines = [dumps({"i": i}) for i in range(3)]
    whole = encode_lines(lines, compress=True)
    junk = decode(whole + b"\0\0\0")
    assert junk.cut and "not gzip data" in junk.cut and junk.data.count(b"\n") == 3
    member = encode_line(lines[0], compress=True)
    bad = bytearray(whole)
    bad[len(member) + len(member) - 5] ^= 0xFF  # the second member's CRC
    broken = decode(bytes(bad))
    assert broken.cut and "corrupt" in broken.cut and broken.data.count(b"\n") == 1
    assert broken.whole_prefix(len(broken.data)) == (len(member), len(broken.data))


def test_not_utf8_inside_gzip_names_the_decompressed_line(tmp_path):
    path = tmp_path / "x.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"a": 1}\n{"b": 2}\n{"c": "\xff"}\n'))
    with pytest.raises(JsonlError, match=r":3: not UTF-8"):
        list(read_objects(path))


def test_encoded_lines_are_the_same_bytes_every_time():
    # no time stamp in the gzip header: a resumed run ends with the same file as a fresh one
    assert encode_line('{"a": 1}', compress=True) == encode_line('{"a": 1}', compress=True)
    assert encode_line('{"a": 1}', compress=False) == b'{"a": 1}\n'
