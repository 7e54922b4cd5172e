"""The one JSON Lines reader: a line ends at "\\n" only, so the whole of JSON is accepted
(U+2028, U+2029 and U+0085 raw inside strings, as ``json.dumps(..., ensure_ascii=False)``
writes them), line numbers count "\\n"s, and nothing non-JSON is ever written."""

from __future__ import annotations

import json
import math

import pytest

from rescue_env.jsonl import JsonlError, dumps, finite_or_null, read_objects, split_lines

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
