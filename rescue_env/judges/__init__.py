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

from rescue_env.judges.agreement import (
    AgreementInputError,
    Rating,
    compute_agreement,
    format_agreement,
    read_scores,
    write_agreement,
)
from rescue_env.judges.anchors import ANCHORS, Anchor
from rescue_env.judges.closed_loop import EpisodeMetrics, episode_metrics, strategy_path
from rescue_env.judges.items import JudgeItem, PairMoment, Turn, items_from_dialogue, items_from_dialogues, pair_moments
from rescue_env.judges.llm_judge import (
    ABSOLUTE_SCHEMA,
    PAIRWISE_SCHEMA,
    AbsoluteResult,
    BatchReport,
    JudgeSettings,
    LLMClientLike,
    LLMJudge,
    PairwiseOutcome,
    length_score_correlation,
    position_bias_report,
)
from rescue_env.judges.offline import OfflineScorer
from rescue_env.judges.pipeline import JudgeConfig, JudgeRunResult, run_judge, run_judge_sync
from rescue_env.judges.rubric import (
    DIMENSIONS,
    LLM_SCORER,
    OFFLINE_SCORER,
    RUBRIC,
    VETO_CRITERIA,
    DimensionScore,
    Judgement,
    render_rubric,
)
from rescue_env.judges.twins import (
    LLMResponder,
    LLMTwinGenerator,
    RecordedResponder,
    TemplateTwinGenerator,
    TwinSet,
    run_twins,
)

__all__ = [
    "ABSOLUTE_SCHEMA",
    "ANCHORS",
    "AbsoluteResult",
    "AgreementInputError",
    "Anchor",
    "BatchReport",
    "DIMENSIONS",
    "DimensionScore",
    "EpisodeMetrics",
    "JudgeConfig",
    "JudgeItem",
    "JudgeRunResult",
    "JudgeSettings",
    "Judgement",
    "LLMClientLike",
    "LLMJudge",
    "LLMResponder",
    "LLMTwinGenerator",
    "LLM_SCORER",
    "OFFLINE_SCORER",
    "OfflineScorer",
    "PAIRWISE_SCHEMA",
    "PairMoment",
    "PairwiseOutcome",
    "RUBRIC",
    "Rating",
    "RecordedResponder",
    "TemplateTwinGenerator",
    "Turn",
    "TwinSet",
    "VETO_CRITERIA",
    "compute_agreement",
    "episode_metrics",
    "format_agreement",
    "items_from_dialogue",
    "items_from_dialogues",
    "length_score_correlation",
    "pair_moments",
    "position_bias_report",
    "read_scores",
    "render_rubric",
    "run_judge",
    "run_judge_sync",
    "run_twins",
    "strategy_path",
    "write_agreement",
]
