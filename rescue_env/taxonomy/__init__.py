"""Label sets of RESCUE-BENCH (DESIGN.md §3), their definitions, and the action encoding.

Label names and orders are the benchmark's (the order matters: it is the order used to pad
rankings and to index one-hot encodings). Definitions, "use when" and "not when" notes are
this project's, written from EFT, the Gottman method, IBCT, structural family therapy and
family systems theory; they live in ``labels.yaml`` beside this module.
"""

from __future__ import annotations

from rescue_env.taxonomy.actions import ActionEncoding, Decision, TargetOption
from rescue_env.taxonomy.labels import (
    COUPLE_PATTERNS,
    COUPLE_STRATEGIES,
    FAMILY_PATTERNS,
    FAMILY_STRATEGIES,
    UTTERANCE_TYPES,
    LabelInfo,
    all_patterns,
    all_strategies,
    label_info,
    patterns,
    strategies,
)

__all__ = [
    "ActionEncoding",
    "COUPLE_PATTERNS",
    "COUPLE_STRATEGIES",
    "Decision",
    "FAMILY_PATTERNS",
    "FAMILY_STRATEGIES",
    "LabelInfo",
    "TargetOption",
    "UTTERANCE_TYPES",
    "all_patterns",
    "all_strategies",
    "label_info",
    "patterns",
    "strategies",
]
