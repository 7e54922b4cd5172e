"""Predictors for the six tasks: the protocol, offline baselines and the agent adapter.

A predictor answers batches of :class:`~rescue_env.tasks.instances.Instance` of one task
with :class:`Prediction` objects (same order). Answer shapes (``Prediction.value``):

- ``itp``: ``"yes"`` or ``"no"`` (speak after the decision row or keep listening);
- ``rpp`` / ``stp`` / ``ssp``: a ranked list of labels (top 3 are scored);
- ``er``: ``{"emotion": str, "intensity": int 0-10}``;
- ``vp``: a list of ``{"source", "target", "viewpoint"}``.

A prediction that could not be made is ``Prediction(failed=True, reason=...)``: it is scored
as wrong and counted, never dropped and never given the gold label.

Offline predictors here:

- :class:`MajorityPredictor`, :class:`PriorPredictor`, :class:`RandomPredictor`: label
  statistics fitted on gold labels (by default of the evaluated dialogues themselves, the
  usual majority-baseline reference; pass ``fit_dialogues`` to fit elsewhere);
- :class:`AgentPredictor`: any :class:`~rescue_env.agents.base.TherapistAgent` through state
  extraction at the instance's row; RPP through a :class:`PatternClassifier`.

All of them answer ER and VP with :class:`CarryForwardGenerator` (the speaker's last
annotated emotion / viewpoints, carried forward), a generative baseline that needs no
model. Note that the offline predictors read the *annotations* of prior rows (the state a
simulator exposes), whereas an LLM predictor sees the transcript only.
"""

from __future__ import annotations

import logging
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import numpy as np

from rescue_env.data.groups import check_group_sizes
from rescue_env.data.schema import THERAPIST, Dialogue, Row
from rescue_env.state import GroupState, StateTracker
from rescue_env.tasks.instances import (
    GENERATIVE_TASKS,
    TASKS,
    Instance,
    build_instances,
    canonical_target,
    check_task,
    clean,
    paper_target_label,
    released_target_label,
    round_intensity,
)
from rescue_env.taxonomy.actions import DEFAULT_MAX_MEMBERS, ActionEncoding
from rescue_env.taxonomy.labels import patterns

log = logging.getLogger(__name__)


@dataclass
class Prediction:
    """A predictor's answer to one instance (see the module docstring for ``value``).

    ``extra`` carries optional details written to ``details.jsonl`` (confidence, the
    model's reason, the probability it gave).
    """

    value: Any = None
    failed: bool = False
    reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def failure(cls, reason: str) -> Prediction:
        return cls(None, True, reason)


@runtime_checkable
class Predictor(Protocol):
    """What the runner needs from a predictor.

    ``supports(task)`` is ``None`` when the predictor can do the task, else the reason it
    cannot (the task is then reported as skipped). ``prepare`` is called once per task
    before any batch (fitting, caching). ``apredict`` answers one batch (instances of one
    sample, at most ``batch_size``) and returns one :class:`Prediction` per instance, in
    order; it must not raise for an answer it cannot produce (return a failure instead).
    """

    name: str
    batch_size: int

    def supports(self, task: str) -> str | None: ...

    def prepare(self, task: str, profile: str, dialogues: Sequence[Dialogue]) -> None: ...

    async def apredict(self, task: str, batch: list[Instance]) -> list[Prediction]: ...

    def describe(self) -> dict[str, Any]: ...


def _stable_seed(*parts: Any) -> int:
    """A seed from values, stable across runs and processes (unlike ``hash``)."""
    return zlib.crc32("\x1f".join(str(p) for p in parts).encode("utf-8"))


def _dedupe(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


# ---------------------------------------------------------------------------------------------
# ER / VP: carry-forward generator


class CarryForwardGenerator:
    """Offline generative baseline for ER and VP.

    ER: the speaker's latest annotated ``internal_emotion`` in the rows before, with its
    intensity; a speaker with none so far gets :attr:`default_emotion` at
    :attr:`default_intensity`. VP: the speaker's viewpoints from the latest earlier row that
    annotates any (source = speaker); none so far gives an empty list (scored, not failed).
    """

    name = "carry_forward"
    default_emotion = "feels tense and uneasy"
    default_intensity = 6

    def er(self, inst: Instance) -> Prediction:
        speaker = inst.context.get("speaker", "")
        for row in reversed(inst.prior_rows(-1)):
            for e in row.internal_emotion:
                if clean(e.person) == speaker and clean(e.emotion_description):
                    intensity = round_intensity(e.intensity)
                    if intensity is not None:
                        return Prediction({"emotion": clean(e.emotion_description), "intensity": max(0, min(10, intensity))}, extra={"from_row": row.row_index})
        return Prediction({"emotion": self.default_emotion, "intensity": self.default_intensity}, extra={"from_row": None})

    def vp(self, inst: Instance) -> Prediction:
        speaker = inst.context.get("speaker", "")
        for row in reversed(inst.prior_rows(-1)):
            items = [
                {"source": speaker, "target": clean(v.target), "viewpoint": clean(v.viewpoint)}
                for v in row.viewpoints_attitudes
                if clean(v.source) == speaker and clean(v.target) and clean(v.viewpoint)
            ]
            if items:
                return Prediction(items, extra={"from_row": row.row_index})
        return Prediction([], extra={"from_row": None})


# ---------------------------------------------------------------------------------------------
# RPP: pattern classifiers


@dataclass
class PatternQuery:
    """What a pattern classifier may use: the scenario and its labels (taxonomy order), the
    rows before the asked row, and the group state after them (``None`` if not extracted)."""

    scenario: str
    labels: tuple[str, ...]
    prior_rows: Sequence[Row]
    state: GroupState | None = None


@runtime_checkable
class PatternClassifier(Protocol):
    """Predicts the relation pattern at a row from what came before it.

    ``predict_proba`` returns probabilities over ``query.labels`` (missing labels count as
    0); the top 3 by probability, ties in taxonomy order, are the RPP ranking. The
    calibrated simulator provides one; :class:`CarryForwardPatternClassifier` is built in.
    """

    def predict_proba(self, query: PatternQuery) -> dict[str, float]: ...


class CarryForwardPatternClassifier:
    """The last observed pattern carried forward, then the transition-frequency prior.

    The last pattern is the latest earlier row's annotated relation label (``""``, no clear
    pattern, clears it; labels outside the taxonomy are ignored), as in
    :class:`~rescue_env.state.StateTracker`. With weight ``carry`` it gets the top rank;
    the rest of the mass follows the add-one-smoothed frequencies of transitions from it
    (between consecutive annotated labels of a dialogue) fitted by :meth:`fit`; with no last
    pattern, the marginal label frequencies. Unfitted, the prior is uniform (taxonomy order).
    """

    name = "carry_forward_pattern"

    def __init__(self, carry: float = 0.6, smoothing: float = 1.0):
        if not 0.5 < carry <= 1.0:
            raise ValueError(f"carry must be in (0.5, 1] so that the carried pattern ranks first, got {carry}")
        self.carry = carry
        self.smoothing = smoothing
        self.transitions: dict[str, Counter[tuple[str, str]]] = defaultdict(Counter)
        self.marginal: dict[str, Counter[str]] = defaultdict(Counter)

    def fit(self, dialogues: Sequence[Dialogue]) -> CarryForwardPatternClassifier:
        """Count label transitions and marginals per scenario; returns ``self``."""
        for d in dialogues:
            labels = set(patterns(d.scenario))
            prev: str | None = None
            for row in d.rows:
                lab = row.relation_label
                if lab is None:
                    continue
                if lab == "":
                    prev = None
                    continue
                if lab not in labels:
                    continue
                self.marginal[d.scenario][lab] += 1
                if prev is not None:
                    self.transitions[d.scenario][(prev, lab)] += 1
                prev = lab
        return self

    @staticmethod
    def last_pattern(prior_rows: Sequence[Row], labels: Sequence[str]) -> str | None:
        label_set = set(labels)
        for row in reversed(prior_rows):
            lab = row.relation_label
            if lab is None:
                continue
            if lab == "":
                return None
            if lab in label_set:
                return lab
        return None

    def predict_proba(self, query: PatternQuery) -> dict[str, float]:
        labels = query.labels
        last = self.last_pattern(query.prior_rows, labels)
        if last is None:
            counts = {lab: self.marginal[query.scenario][lab] + self.smoothing for lab in labels}
        else:
            counts = {lab: self.transitions[query.scenario][(last, lab)] + self.smoothing for lab in labels}
        total = sum(counts.values()) or 1.0
        prior = {lab: c / total for lab, c in counts.items()}
        if last is None:
            return prior
        return {lab: (1 - self.carry) * p + (self.carry if lab == last else 0.0) for lab, p in prior.items()}


def top_labels(proba: dict[str, float], labels: Sequence[str], k: int = 3) -> list[str]:
    """The ``k`` most probable labels, ties broken by the order of ``labels``."""
    order = {lab: i for i, lab in enumerate(labels)}
    return sorted(labels, key=lambda lab: (-float(proba.get(lab, 0.0)), order[lab]))[:k]


# ---------------------------------------------------------------------------------------------
# base


class BasePredictor:
    """Shared machinery of the offline predictors: one instance at a time, ER/VP through a
    :class:`CarryForwardGenerator`. Subclasses implement :meth:`predict_one`."""

    name = "base"
    batch_size = 64

    def __init__(self, generator: CarryForwardGenerator | None = None):
        self.generator = generator if generator is not None else CarryForwardGenerator()

    def supports(self, task: str) -> str | None:
        check_task(task)
        if task in GENERATIVE_TASKS and self.generator is None:
            return f"{self.name} is not generative and no offline generator is attached"
        return None

    def prepare(self, task: str, profile: str, dialogues: Sequence[Dialogue]) -> None:
        """Hook called once per task before prediction (fitting)."""

    async def apredict(self, task: str, batch: list[Instance]) -> list[Prediction]:
        return [self.predict(task, inst) for inst in batch]

    def predict(self, task: str, inst: Instance) -> Prediction:
        """One instance; exceptions become failures so that a run never aborts."""
        try:
            if task == "er":
                return self.generator.er(inst)
            if task == "vp":
                return self.generator.vp(inst)
            return self.predict_one(task, inst)
        except Exception as exc:  # a bug in one answer must not stop the evaluation
            return Prediction.failure(f"{type(exc).__name__}: {exc}")

    def predict_one(self, task: str, inst: Instance) -> Prediction:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "generative_tasks": getattr(self.generator, "name", None)}


# ---------------------------------------------------------------------------------------------
# baselines


def target_role(label: str, inst: Instance) -> str:
    """A name-free role for a target label, so that target statistics transfer across
    samples: ``group``, ``dyad``, ``speaker1`` (latest client speaker before the row),
    ``speaker2``, … in order of recency, ``silent`` (a client who has not spoken) or
    ``other`` (a non-client label of the released candidates)."""
    d = inst.dialogue
    group = d.group_label if d is not None else ""
    if label == group:
        return "group"
    if " & " in label:
        return "dyad"
    recent: list[str] = []
    for row in reversed(inst.prior_rows(-1)):
        s = row.primary_speaker
        if s != THERAPIST and s not in recent:
            recent.append(s)
    if label in recent:
        return f"speaker{recent.index(label) + 1}"
    if label in inst.context.get("participants", ()):
        return "silent"
    return "other"


class _FittedBaseline(BasePredictor):
    """Gold-label statistics per task and scenario, fitted in :meth:`prepare` on
    ``fit_dialogues`` (default: the evaluated dialogues)."""

    def __init__(self, *, seed: int = 0, fit_dialogues: Sequence[Dialogue] | None = None, generator: CarryForwardGenerator | None = None):
        super().__init__(generator)
        self.seed = int(seed)
        self.fit_dialogues = list(fit_dialogues) if fit_dialogues is not None else None
        # (task, scenario) -> Counter of gold labels (STP: of target roles)
        self.counts: dict[tuple[str, str], Counter[str]] = {}

    def prepare(self, task: str, profile: str, dialogues: Sequence[Dialogue]) -> None:
        if task in GENERATIVE_TASKS:
            return
        data = self.fit_dialogues if self.fit_dialogues is not None else list(dialogues)
        for scn in ("couple", "family"):
            self.counts[(task, scn)] = Counter()
        for inst in build_instances(data, task, profile):
            key = target_role(inst.gold, inst) if task == "stp" else inst.gold
            self.counts.setdefault((task, inst.scenario), Counter())[key] += 1

    def _counts(self, task: str, inst: Instance) -> Counter[str]:
        c = self.counts.get((task, inst.scenario))
        if c is None:
            raise RuntimeError(f"{self.name}: prepare() was not called for task {task!r}")
        return c

    def _weights(self, task: str, inst: Instance, options: list[str]) -> np.ndarray:
        """Frequency of each option (STP: of its role, shared among options of that role)."""
        c = self._counts(task, inst)
        if task == "stp":
            roles = [target_role(o, inst) for o in options]
            per_role = Counter(roles)
            return np.array([c[r] / per_role[r] for r, o in zip(roles, options)], dtype=float)
        return np.array([c[o] for o in options], dtype=float)

    def _rng(self, inst: Instance) -> np.random.Generator:
        # Per-instance stream: the same answer whatever the order or a resumed run.
        return np.random.default_rng([self.seed, _stable_seed(inst.task, inst.id)])

    @staticmethod
    def _options(inst: Instance) -> list[str]:
        # released candidate lists can hold "" and "__empty__" placeholders: never answers
        return _dedupe([c for c in inst.candidates if c and c != "__empty__"]) or list(inst.candidates)


class MajorityPredictor(_FittedBaseline):
    """Always the most frequent gold answer: ITP the majority class (``yes`` on a tie, as
    balanced ITP always is); RPP/SSP labels by gold frequency in the scenario; STP targets
    by the frequency of their role (:func:`target_role`). Ties in candidate order."""

    name = "majority"

    def predict_one(self, task: str, inst: Instance) -> Prediction:
        if task == "itp":
            c = self._counts(task, inst)
            return Prediction("yes" if c["yes"] >= c["no"] else "no")
        options = self._options(inst)
        w = self._weights(task, inst, options)
        order = sorted(range(len(options)), key=lambda i: (-w[i], i))
        return Prediction([options[i] for i in order[:3]])


class PriorPredictor(_FittedBaseline):
    """Draws from the label prior (seeded, per instance): ITP says ``yes`` with the gold
    rate of ``yes``; rankings are drawn without replacement with probability proportional
    to add-one-smoothed gold frequencies (STP: of the target's role)."""

    name = "prior"

    def predict_one(self, task: str, inst: Instance) -> Prediction:
        rng = self._rng(inst)
        if task == "itp":
            c = self._counts(task, inst)
            p = (c["yes"] + 1) / (c["yes"] + c["no"] + 2)
            return Prediction("yes" if rng.random() < p else "no", extra={"p_speak": p})
        options = self._options(inst)
        w = self._weights(task, inst, options) + 1.0
        k = min(3, len(options))
        idx = rng.choice(len(options), size=k, replace=False, p=w / w.sum())
        return Prediction([options[int(i)] for i in idx])


class RandomPredictor(_FittedBaseline):
    """Uniform guesses (seeded, per instance): ITP yes/no with 1/2 each, rankings a uniform
    draw of 3 candidates."""

    name = "random"

    def prepare(self, task: str, profile: str, dialogues: Sequence[Dialogue]) -> None:
        """Nothing to fit."""

    def predict_one(self, task: str, inst: Instance) -> Prediction:
        rng = self._rng(inst)
        if task == "itp":
            return Prediction("yes" if rng.random() < 0.5 else "no")
        options = self._options(inst)
        idx = rng.permutation(len(options))[:3]
        return Prediction([options[int(i)] for i in idx])


# ---------------------------------------------------------------------------------------------
# agents


def encoding_for(scenario: str, n_members: int) -> ActionEncoding:
    """The scenario's default action encoding, widened for a group larger than its default
    cap (a family of 7; a couple of three where the encoding takes it). Raises ``ValueError``
    when the encoding cannot hold ``n_members`` (never a smaller group)."""
    default = DEFAULT_MAX_MEMBERS[scenario]
    if n_members > default:
        return ActionEncoding(scenario, max_members=n_members)
    return ActionEncoding(scenario)


def check_agent_groups(agent: Any, scenario: str, dialogues: Sequence[Dialogue]) -> None:
    """Raise :class:`~rescue_env.data.GroupSizeError` naming every ``scenario`` dialogue whose
    group ``agent`` cannot rank over: larger than the action encoding takes, or than a
    trained policy's observations hold (its ``observer``; ``agent=None`` checks the encoding
    only). Agent predictions use every member."""
    ds = [d for d in dialogues if d.scenario == scenario]
    observer = getattr(agent, "observer", None)
    if observer is not None:  # a trained policy: its spaces fix the group size
        check_group_sizes(ds, observer.cap, remedy=f"this policy was trained on groups of at most {observer.cap}; "
                          "evaluate it on data it can see whole, or retrain with env.max_members large enough")
    if not ds:
        return
    cap = max(len(d.participants) for d in ds)
    while cap > 1 and not _encodable(scenario, cap):
        cap -= 1
    check_group_sizes(ds, cap, remedy=f"the {scenario} action encoding takes at most {cap} members; evaluate this sample "
                      "with predictor=prior, majority, random or llm, or leave it out of data.path")


def _encodable(scenario: str, n_members: int) -> bool:
    try:
        encoding_for(scenario, n_members)
    except ValueError:
        return False
    return True


class AgentPredictor(BasePredictor):
    """Any therapist agent through state extraction at the instance's row.

    ITP: ``p_speak`` of the state after the decision row, ``yes`` when above
    ``threshold`` (default: the agent's ``speak_threshold`` where it has one, e.g. the
    behaviour prior's rate of speaking in its training data, else 0.5). STP: the agent's top target options as target labels of the profile.
    SSP: its top strategies. RPP: ``pattern_classifier`` on the prior rows and state
    (default :class:`CarryForwardPatternClassifier`, fitted on ``fit_dialogues`` or the
    evaluated dialogues). ER/VP: the carry-forward generator.

    ``agent`` is one agent for every scenario, or a function ``scenario -> agent``.
    """

    def __init__(
        self,
        agent: Any,
        *,
        name: str | None = None,
        threshold: float | None = None,
        pattern_classifier: PatternClassifier | None = None,
        fit_dialogues: Sequence[Dialogue] | None = None,
        generator: CarryForwardGenerator | None = None,
    ):
        super().__init__(generator)
        self._agent_for: Callable[[str], Any] = agent if callable(agent) and not hasattr(agent, "rank") else (lambda scenario: agent)
        self._agents: dict[str, Any] = {}
        label = name or getattr(agent, "name", None) or "agent"
        self.name = f"agent:{label}"
        self.threshold = None if threshold is None else float(threshold)
        self.pattern_classifier = pattern_classifier
        self._fit_pc = pattern_classifier is None
        self.fit_dialogues = list(fit_dialogues) if fit_dialogues is not None else None
        self._states: dict[int, tuple[GroupState, list[GroupState]]] = {}
        #: sample id -> why the agent cannot answer its instances (filled by :meth:`prepare`)
        self.unanswerable: dict[str, str] = {}
        self._warned: set[str] = set()

    def agent(self, scenario: str) -> Any:
        if scenario not in self._agents:
            self._agents[scenario] = self._agent_for(scenario)
        return self._agents[scenario]

    def prepare(self, task: str, profile: str, dialogues: Sequence[Dialogue]) -> None:
        """Build the agent of each scenario in ``dialogues`` and note the samples it cannot
        answer (:attr:`unanswerable`): a policy of the other scenario, or a group larger than
        the policy sees. Their instances fail with that reason (counted, never dropped) and a
        warning names them; when no scenario can be answered, the error is raised."""
        scenarios = sorted({d.scenario for d in dialogues})
        errors: dict[str, ValueError] = {}
        for scenario in scenarios:
            try:
                agent = self.agent(scenario)
            except ValueError as exc:  # e.g. a family policy asked about couples
                errors[scenario] = exc
                for d in dialogues:
                    if d.scenario == scenario:
                        self.unanswerable[d.sample_id] = f"{self.name} cannot answer {scenario} sessions: {exc}"
                continue
            ds = [d for d in dialogues if d.scenario == scenario]
            observer = getattr(agent, "observer", None)
            if observer is not None:  # a trained policy: its spaces fix the group size
                for d in ds:
                    if len(d.participants) > observer.cap:
                        self.unanswerable[d.sample_id] = (
                            f"{self.name} was trained on {scenario} groups of at most {observer.cap} members; this one has "
                            f"{len(d.participants)} (retrain with env.max_members={len(d.participants)} to answer it)"
                        )
            check_agent_groups(None, scenario, [d for d in ds if d.sample_id not in self.unanswerable])
        if errors and len(errors) == len(scenarios):
            # one cause (a bad prior file) is said once, and keeps its kind: a PriorError is
            # the user's to fix (exit 2), not a bug
            excs = list(errors.values())
            kind = type(excs[0]) if all(type(e) is type(excs[0]) for e in excs) else ValueError
            raise kind("; ".join(dict.fromkeys(str(e) for e in excs)))
        new = sorted(set(self.unanswerable) - self._warned)
        if new:
            self._warned.update(new)
            lines = "\n".join(f"  {sid}: {self.unanswerable[sid]}" for sid in new)
            log.warning("%s cannot answer the instances of %d sample(s); they count as failed:\n%s", self.name, len(new), lines)
        if task == "rpp" and self.pattern_classifier is None:
            data = self.fit_dialogues if self.fit_dialogues is not None else list(dialogues)
            self.pattern_classifier = CarryForwardPatternClassifier().fit(data)

    def state_before(self, inst: Instance, upto: int) -> GroupState:
        """State after the first ``upto`` rows of the instance's dialogue (cached per dialogue)."""
        d = inst.dialogue
        assert d is not None, "agent prediction needs the instance's dialogue"
        key = id(d)
        if key not in self._states:
            tracker = StateTracker(d.scenario, d.participants)
            initial = tracker.state.copy()
            self._states[key] = (initial, [tracker.update(r).copy() for r in d.rows])
        initial, states = self._states[key]
        return initial if upto == 0 else states[upto - 1]

    def predict_one(self, task: str, inst: Instance) -> Prediction:
        d = inst.dialogue
        assert d is not None
        if d.sample_id in self.unanswerable and task != "rpp":
            return Prediction.failure(self.unanswerable[d.sample_id])
        if task == "rpp":
            assert self.pattern_classifier is not None, "prepare('rpp', ...) fits the pattern classifier"
            query = PatternQuery(d.scenario, tuple(inst.candidates), inst.prior_rows(-1), self.state_before(inst, inst.row - 1))
            proba = self.pattern_classifier.predict_proba(query)
            return Prediction(top_labels(proba, inst.candidates), extra={"proba": {k: round(float(v), 4) for k, v in proba.items()}})
        upto = inst.row if task == "itp" else inst.row - 1
        state = self.state_before(inst, upto)
        agent = self.agent(d.scenario)
        encoding = encoding_for(d.scenario, len(state.members))
        ranking = agent.rank(state, encoding)
        if task == "itp":
            p = float(ranking.p_speak)
            threshold = self.threshold if self.threshold is not None else float(getattr(agent, "speak_threshold", 0.5))
            return Prediction("yes" if p > threshold else "no", extra={"p_speak": round(p, 4), "threshold": round(threshold, 4)})
        if task == "ssp":
            return Prediction(ranking.top_strategies(encoding, 3))
        # stp: target options as the profile's labels (dyads collapse in `released`)
        labels = []
        for t in ranking.top_targets(encoding, list(state.members), k=encoding.n_targets):
            lab = paper_target_label(t, d) if inst.profile == "paper" else released_target_label(canonical_target(t), d.group_label)
            if lab and lab not in labels:
                labels.append(lab)
        return Prediction(labels[:3])

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["pattern_classifier"] = getattr(self.pattern_classifier, "name", type(self.pattern_classifier).__name__ if self.pattern_classifier else "carry_forward_pattern")
        out["threshold"] = self.threshold
        return out


BASELINES: dict[str, type[_FittedBaseline]] = {"majority": MajorityPredictor, "prior": PriorPredictor, "random": RandomPredictor}


def make_baseline(name: str, *, seed: int = 0, fit_dialogues: Sequence[Dialogue] | None = None) -> _FittedBaseline:
    """``majority``, ``prior`` or ``random``; ``ValueError`` names them otherwise."""
    try:
        cls = BASELINES[name]
    except KeyError:
        raise ValueError(f"unknown baseline {name!r}: expected one of {list(BASELINES)}") from None
    return cls(seed=seed, fit_dialogues=fit_dialogues)


__all__ = [
    "AgentPredictor",
    "BASELINES",
    "BasePredictor",
    "CarryForwardGenerator",
    "CarryForwardPatternClassifier",
    "MajorityPredictor",
    "PatternClassifier",
    "PatternQuery",
    "Prediction",
    "Predictor",
    "PriorPredictor",
    "RandomPredictor",
    "TASKS",
    "make_baseline",
    "target_role",
    "top_labels",
]
