"""The report's fixed reading aids: one colour per pattern label (distinct from the members'
colours), and a glossary that the README carries too."""

from __future__ import annotations

from pathlib import Path

from matplotlib.colors import to_rgb

from rescue_env.report import MEMBER_COLORS, PATTERN_COLORS, glossary, pattern_color
from rescue_env.taxonomy.labels import all_patterns

README = Path(__file__).resolve().parent.parent / "README.md"


def test_every_pattern_label_has_its_own_colour_unlike_any_member_colour():
    labels = sorted(all_patterns()) + ["none"]
    colours = [to_rgb(pattern_color(lab)) for lab in labels]
    assert len(set(colours)) == len(labels), "two patterns share a colour"
    members = {to_rgb(c) for c in MEMBER_COLORS}
    assert not members & set(colours)
    assert set(PATTERN_COLORS) == set(labels)


def test_the_readme_glossary_names_every_summary_column():
    text = README.read_text(encoding="utf-8")
    table = text[text.index("**Glossary**") :]
    for header, _ in glossary():
        assert f"| {header} |" in table or f"| `{header}` |" in table, header
