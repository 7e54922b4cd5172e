"""The six RESCUE-BENCH tasks as evaluators: ITP, RPP, STP, SSP, ER, VP.

>>> from rescue_env.data import load_dialogues
>>> from rescue_env.tasks import make_baseline, run_tasks
>>> results = run_tasks(load_dialogues(), ["itp", "stp"], make_baseline("majority"),
...                     profile="paper", out_dir="runs/majority", progress=False)  # doctest: +SKIP

Layout: :mod:`~rescue_env.tasks.instances` (instance builders, ``paper`` and ``released``
profiles), :mod:`~rescue_env.tasks.metrics`, :mod:`~rescue_env.tasks.predictors` (baselines,
agent adapter, pattern classifiers, carry-forward generator),
:mod:`~rescue_env.tasks.llm_predictor` (LLM predictor and judges over an async JSON client),
:mod:`~rescue_env.tasks.scorers` (offline ER/VP judge and BERTScore on a shipped model),
:mod:`~rescue_env.tasks.runner` (:func:`run_tasks`: resume, progress, ``tasks.json``,
``details.jsonl``, the table beside the paper's figures; :func:`evaluate` in memory),
:mod:`~rescue_env.tasks.callback` (``TaskEvalCallback``: ``tasks/…`` figures of a policy
during SB3 training; imported on its own, it needs stable-baselines3).
"""

from rescue_env.tasks.instances import (
    GENERATIVE_TASKS,
    PROFILES,
    TASKS,
    Instance,
    InstanceSet,
    build_instances,
    count_instances,
    even_sample,
)
from rescue_env.tasks.llm_predictor import JSONClient, LLMJudge, LLMPredictor
from rescue_env.tasks.metrics import (
    binary_metrics,
    classification_metrics,
    intensity_match,
    normalise_topk,
    rank_metrics,
    rank_position,
    s_er,
)
from rescue_env.tasks.predictors import (
    AgentPredictor,
    CarryForwardGenerator,
    CarryForwardPatternClassifier,
    MajorityPredictor,
    PatternClassifier,
    PatternQuery,
    Prediction,
    Predictor,
    PriorPredictor,
    RandomPredictor,
    make_baseline,
)
from rescue_env.tasks.runner import (
    REFERENCE,
    aggregate,
    arun_tasks,
    evaluate,
    format_table,
    read_details,
    run_tasks,
)
from rescue_env.tasks.scorers import (
    BertScore,
    EmbeddingJudge,
    Grade,
    Judge,
    make_bertscore,
    make_offline_judge,
)

__all__ = [
    "AgentPredictor",
    "BertScore",
    "CarryForwardGenerator",
    "CarryForwardPatternClassifier",
    "EmbeddingJudge",
    "GENERATIVE_TASKS",
    "Grade",
    "Instance",
    "InstanceSet",
    "JSONClient",
    "Judge",
    "LLMJudge",
    "LLMPredictor",
    "MajorityPredictor",
    "PROFILES",
    "PatternClassifier",
    "PatternQuery",
    "Prediction",
    "Predictor",
    "PriorPredictor",
    "REFERENCE",
    "RandomPredictor",
    "TASKS",
    "aggregate",
    "arun_tasks",
    "binary_metrics",
    "build_instances",
    "classification_metrics",
    "count_instances",
    "evaluate",
    "even_sample",
    "format_table",
    "intensity_match",
    "make_baseline",
    "make_bertscore",
    "make_offline_judge",
    "normalise_topk",
    "rank_metrics",
    "rank_position",
    "read_details",
    "run_tasks",
    "s_er",
]
