"""Pattern, strategy and utterance-type labels per scenario, with their definitions."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal

import yaml

from rescue_env.data.schema import Scenario

COUPLE_PATTERNS: tuple[str, ...] = (
    "pursue_withdraw",
    "attack_attack",
    "withdraw_withdraw",
    "repair_softening",
    "constructive_alignment",
    "mixed_transition",
)
FAMILY_PATTERNS: tuple[str, ...] = (
    "escalation_conflict",
    "pursue_withdraw",
    "mutual_disengagement",
    "cross_generational_coalition",
    "boundary_hierarchy_strain",
    "repair_softening",
    "cooperative_family_alliance",
    "mixed_transition",
)
COUPLE_STRATEGIES: tuple[str, ...] = (
    "counterbalance",
    "safeguard",
    "goal_align",
    "track",
    "reframe",
    "evoke",
    "enact",
    "join",
    "detach",
    "repair",
)
FAMILY_STRATEGIES: tuple[str, ...] = (
    "safeguard",
    "join",
    "track",
    "counterbalance",
    "enact",
    "boundary",
    "reframe",
    "repair",
)
UTTERANCE_TYPES: tuple[str, ...] = (
    "disclosure",
    "defense",
    "accusation",
    "reflection",
    "recollection",
    "request",
    "validation",
    "withdrawal",
    "repair",
    "other",
)

_PATTERNS: dict[str, tuple[str, ...]] = {"couple": COUPLE_PATTERNS, "family": FAMILY_PATTERNS}
_STRATEGIES: dict[str, tuple[str, ...]] = {"couple": COUPLE_STRATEGIES, "family": FAMILY_STRATEGIES}


def _check_scenario(scenario: str) -> None:
    if scenario not in _PATTERNS:
        raise ValueError(f"unknown scenario {scenario!r}: expected 'couple' or 'family'")


def patterns(scenario: Scenario | str) -> tuple[str, ...]:
    """Relation-pattern labels of ``scenario`` in the benchmark's order."""
    _check_scenario(scenario)
    return _PATTERNS[scenario]


def strategies(scenario: Scenario | str) -> tuple[str, ...]:
    """Support-strategy labels of ``scenario`` in the benchmark's order."""
    _check_scenario(scenario)
    return _STRATEGIES[scenario]


def all_patterns() -> frozenset[str]:
    """Every pattern label of either scenario."""
    return frozenset(COUPLE_PATTERNS) | frozenset(FAMILY_PATTERNS)


def all_strategies() -> frozenset[str]:
    """Every strategy label of either scenario."""
    return frozenset(COUPLE_STRATEGIES) | frozenset(FAMILY_STRATEGIES)


@dataclass(frozen=True, slots=True)
class LabelInfo:
    """A label with the clinical notes a prompt or a reader needs.

    ``valence`` (patterns only) grades how constructive the pattern is, -1..1; ``move``
    (strategies only) is the coarse kind of move: soothing, exploring, connecting,
    structuring or advising (used for strategy-path health).
    """

    name: str
    kind: Literal["pattern", "strategy", "utterance_type"]
    definition: str
    use_when: str = ""
    not_when: str = ""
    valence: float = 0.0
    move: str = ""


@cache
def _load_yaml() -> dict:
    text = resources.files("rescue_env.taxonomy").joinpath("labels.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


@cache
def label_info(scenario: Scenario | str, kind: Literal["pattern", "strategy", "utterance_type"]) -> tuple[LabelInfo, ...]:
    """Definitions of every label of one kind, in the benchmark's order.

    Raises ``KeyError`` if ``labels.yaml`` lacks a label of the list (a packaging error).
    """
    data = _load_yaml()
    if kind == "utterance_type":
        entries = {e["name"]: e for e in data["utterance_types"]}
        names = UTTERANCE_TYPES
    else:
        _check_scenario(scenario)
        section = "patterns" if kind == "pattern" else "strategies"
        entries = {e["name"]: e for e in data[section][scenario]}
        names = patterns(scenario) if kind == "pattern" else strategies(scenario)
    out = []
    for name in names:
        e = entries[name]
        out.append(
            LabelInfo(
                name=name,
                kind=kind,
                definition=str(e.get("definition", "")).strip(),
                use_when=str(e.get("use_when", "")).strip(),
                not_when=str(e.get("not_when", "")).strip(),
                valence=float(e.get("valence", 0.0)),
                move=str(e.get("family", "")).strip(),
            )
        )
    return tuple(out)
