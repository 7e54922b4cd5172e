"""The settings of a judge run (:func:`rescue_env.judges.run_judge`), listed once.

``rescue judge``'s Hydra schema extends :class:`JudgeConfig` with the app's own settings (the
inputs, the LLM server, the outputs), so its command line is these fields: ``scorer=llm``,
``twins.items_per_agent=2``, ``pairwise.margin=0.5``...
"""

# no ``from __future__ import annotations``: OmegaConf reads these annotations as types
from dataclasses import dataclass, field
from typing import Any, List, Optional

from rescue_env.judges.rubric import LLM_SCORER, OFFLINE_SCORER

MODES = ("absolute", "pairwise", "twins")
SCORERS = ("offline", "llm")
#: therapist strategies that explore feelings, and advice-like ones (the closed-loop view's default classes)
EXPLORE_STRATEGIES: tuple[str, ...] = ("evoke", "join", "track")
ADVICE_STRATEGIES: tuple[str, ...] = ("reframe", "goal_align")


@dataclass
class PairwiseConfig:
    """Pairwise mode: two agents' replies at the same moment, shown in both orders."""

    #: moments compared per agent pair (null: all)
    max_pairs: Optional[int] = 50
    #: offline scorer: the overall difference that counts as a win
    margin: float = 0.25


@dataclass
class TwinsConfig:
    """Twins mode: perturbed twins of a moment (event swapped / feeling swapped)."""

    #: template (offline banks) | llm
    generator: str = "template"
    #: recorded (replay the agent's reply) | llm (the LLM answers as therapist)
    responder: str = "recorded"
    items_per_agent: int = 10
    #: replies this similar to their twin's count as template-like
    template_threshold: float = 0.9


@dataclass
class ClosedLoopConfig:
    """How the closed-loop view classes the therapist's strategies."""

    explore_strategies: List[str] = field(default_factory=lambda: list(EXPLORE_STRATEGIES))
    advice_strategies: List[str] = field(default_factory=lambda: list(ADVICE_STRATEGIES))


@dataclass
class JudgeConfig:
    """Settings of a judge run; building one checks them (``ValueError`` naming the setting
    for an unknown scorer, mode, generator or responder, or a number out of range)."""

    #: offline: lexical heuristic, no network, labelled "offline-heuristic" everywhere;
    #: llm: the rubric judge through rescue_env.llm
    scorer: str = "offline"
    #: any of absolute (score every therapist reply), pairwise (two agents, same moment, both
    #: orders), twins (perturbed twins: event swapped / feeling swapped)
    modes: List[str] = field(default_factory=lambda: ["absolute"])
    #: the judge's temperature, fixed (``rescue judge`` copies it into llm.temperature)
    temperature: float = 0.0
    seed: int = 0
    #: noise: with repeats > 0 every item gets a second sample; the repeat_items items whose
    #: two samples differ most get ``repeats`` more; samples are averaged
    repeats: int = 0
    repeat_items: int = 10
    #: drift: anchors of known quality mixed into each batch of batch_size items; a batch is
    #: flagged when its anchors' mean absolute error exceeds anchor_tolerance (0-4 scale)
    batch_size: int = 16
    anchors_per_batch: int = 2
    anchor_tolerance: float = 0.75
    #: transcript rows shown before each reply
    context_rows: int = 6
    #: also judge the therapist rows of an episode's seed history (its first start_row rows,
    #: replayed from the seed dialogue and the same for every agent); off: the agent's own only
    include_history: bool = False
    #: cap on judged replies per agent (a seeded sample); null: all
    max_items_per_agent: Optional[int] = None
    #: pairwise: null = every pair of agents in the run, or [agent_a, agent_b]
    agents_pair: Optional[List[str]] = None
    pairwise: PairwiseConfig = field(default_factory=PairwiseConfig)
    twins: TwinsConfig = field(default_factory=TwinsConfig)
    closed_loop: ClosedLoopConfig = field(default_factory=ClosedLoopConfig)
    #: the judge model's name in the records (``rescue judge``: null = llm.model)
    model: Optional[str] = None
    progress: bool = True

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> "JudgeConfig":
        """Raise ``ValueError`` for a bad setting; returns the config."""
        if self.scorer not in SCORERS:
            raise ValueError(f"scorer={self.scorer!r}: expected one of {', '.join(SCORERS)}")
        bad = [m for m in self.modes if m not in MODES]
        if bad or not self.modes:
            raise ValueError(f"modes={list(self.modes)!r}: expected a non-empty list drawn from {', '.join(MODES)}")
        if self.twins.generator not in ("template", "llm"):
            raise ValueError(f"twins.generator={self.twins.generator!r}: expected template or llm")
        if self.twins.responder not in ("recorded", "llm"):
            raise ValueError(f"twins.responder={self.twins.responder!r}: expected recorded or llm")
        if self.agents_pair is not None and (len(self.agents_pair) != 2 or self.agents_pair[0] == self.agents_pair[1]):
            raise ValueError(f"agents_pair={list(self.agents_pair)!r}: expected two different agent names, or null for all pairs")
        self.settings()
        return self

    def settings(self) -> Any:
        """The batch, anchor and repeat settings of the LLM judge (checked there)."""
        from rescue_env.judges.llm_judge import JudgeSettings

        return JudgeSettings(self.batch_size, self.anchors_per_batch, self.anchor_tolerance, self.repeats, self.repeat_items, self.seed)

    @property
    def scorer_label(self) -> str:
        return OFFLINE_SCORER if self.scorer == "offline" else LLM_SCORER

    def needs_client(self) -> bool:
        """Whether the run calls an LLM (the LLM scorer, or LLM twins)."""
        return self.scorer == "llm" or ("twins" in self.modes and "llm" in (self.twins.generator, self.twins.responder))
