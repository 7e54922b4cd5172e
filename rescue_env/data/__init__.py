"""RESCUE-BENCH data: typed records, loading of both layouts, validation, bundled seeds.

>>> from rescue_env.data import load_dialogues
>>> seeds = load_dialogues()            # the bundled seed dialogues
>>> real = load_dialogues("benchmark_191.jsonl")   # or a directory of per-sample .json files
"""

from rescue_env.data.errors import DataValidationError, Problem
from rescue_env.data.loader import (
    ValidationReport,
    bundled_seeds_path,
    fix_text,
    load_dialogues,
    parse_dialogue,
    resolve_data_path,
    validate,
    write_jsonl,
)
from rescue_env.data.schema import (
    GROUP_LABELS,
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

__all__ = [
    "GROUP_LABELS",
    "THERAPIST",
    "BackgroundUtterance",
    "DataValidationError",
    "Dialogue",
    "EmotionRecord",
    "InteractionBehavior",
    "PersonDescription",
    "Problem",
    "Row",
    "Scenario",
    "StrategyRecord",
    "ValidationReport",
    "ViewpointRecord",
    "bundled_seeds_path",
    "fix_text",
    "load_dialogues",
    "parse_dialogue",
    "resolve_data_path",
    "validate",
    "write_jsonl",
]
