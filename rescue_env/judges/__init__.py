"""Support-quality judging of therapist replies (DESIGN.md §6).

- :mod:`~rescue_env.judges.rubric`: the five dimensions (0-4, anchored per level, judged
  toward the addressed member and for the others) and the veto.
- :mod:`~rescue_env.judges.items`: what is judged (a reply in its moment) and pairing of
  two agents' replies to the same moment.
- :mod:`~rescue_env.judges.llm_judge`: prompts, JSON Schemas, anchors per batch with drift
  flags, repeats, pairwise in both orders with a position-bias report, length-score
  correlation; talks to any client with ``async complete_json(...)``.
- :mod:`~rescue_env.judges.offline`: the offline heuristic scorer (``scorer:
  "offline-heuristic"``), never an LLM judgement.
- :mod:`~rescue_env.judges.twins`: perturbed twins (event swapped / feeling swapped).
- :mod:`~rescue_env.judges.agreement`: agreement with human raters (exact, MAE, quadratic κ).
- :mod:`~rescue_env.judges.closed_loop`: distress reduction and strategy-path health.
- :mod:`~rescue_env.judges.pipeline` / :mod:`~rescue_env.judges.report`: one run over a
  set of dialogues, and its files (``rescue judge``).

>>> from rescue_env.judges import OfflineScorer, items_from_dialogue
>>> judgements = OfflineScorer().judge_many(items_from_dialogue(dialogue))
"""

import importlib
from typing import Any

#: The package's names by the module that defines them. They are imported on first use
#: (PEP 562), so that reading the settings (:mod:`rescue_env.judges.config`, which every
#: ``rescue`` command's schema uses) does not load the scorers, JSON Schema and all.
_HOMES: dict[str, tuple[str, ...]] = {
    "agreement": ("AgreementInputError", "Rating", "compute_agreement", "format_agreement", "read_scores", "write_agreement"),
    "anchors": ("ANCHORS", "Anchor"),
    "closed_loop": ("EpisodeMetrics", "episode_metrics", "strategy_path"),
    "config": ("ClosedLoopConfig", "JudgeConfig", "PairwiseConfig", "TwinsConfig"),
    "items": ("JudgeItem", "PairMoment", "Turn", "items_from_dialogue", "items_from_dialogues", "pair_moments"),
    "llm_judge": (
        "ABSOLUTE_SCHEMA", "PAIRWISE_SCHEMA", "AbsoluteResult", "BatchReport", "JudgeSettings", "LLMClientLike", "LLMJudge",
        "PairwiseOutcome", "length_score_correlation", "position_bias_report",
    ),
    "offline": ("OfflineScorer",),
    "pipeline": ("JudgeRunResult", "run_judge", "run_judge_sync"),
    "rubric": ("DIMENSIONS", "LLM_SCORER", "OFFLINE_SCORER", "RUBRIC", "VETO_CRITERIA", "DimensionScore", "Judgement", "render_rubric"),
    "twins": ("LLMResponder", "LLMTwinGenerator", "RecordedResponder", "TemplateTwinGenerator", "TwinSet", "run_twins"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = sorted(_HOME_OF)


def __getattr__(name: str) -> Any:
    if name not in _HOME_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOME_OF[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
