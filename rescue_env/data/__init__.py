"""RESCUE-BENCH data: typed records, loading of both layouts, validation, bundled seeds.

>>> from rescue_env.data import load_dialogues
>>> seeds = load_dialogues()            # the bundled seed dialogues
>>> real = load_dialogues("benchmark_191.jsonl")   # or a directory of per-sample .json files
>>> both = load_dialogues(["subset.jsonl", "more.jsonl"])   # or a directory of .jsonl files
"""

from rescue_env.data.errors import DataValidationError, Problem
from rescue_env.data.groups import GroupSizeError, check_group_sizes, group_cap, oversized_groups
from rescue_env.data.loader import (
    DataPath,
    ValidationReport,
    bundled_seeds_path,
    data_sources,
    describe_data_path,
    fix_text,
    load_dialogues,
    parse_dialogue,
    resolve_data_path,
    resolve_data_paths,
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
    "DataPath",
    "DataValidationError",
    "Dialogue",
    "EmotionRecord",
    "GroupSizeError",
    "InteractionBehavior",
    "PersonDescription",
    "Problem",
    "Row",
    "Scenario",
    "StrategyRecord",
    "ValidationReport",
    "ViewpointRecord",
    "bundled_seeds_path",
    "check_group_sizes",
    "data_sources",
    "describe_data_path",
    "fix_text",
    "group_cap",
    "load_dialogues",
    "oversized_groups",
    "parse_dialogue",
    "resolve_data_path",
    "resolve_data_paths",
    "validate",
    "write_jsonl",
]
