"""The LLM client backend (``dynamics=llm``): one LLM persona per client.

Each step, in order:

1. **Who speaks.** The simulator core runs the calibrated transition first
   (:meth:`rescue_env.core.Core.transition`): its turn choice says who speaks (one client, a
   second with the pattern's probability; speakers drawn by being addressed and by
   distress), and its pattern draw is ρ_{t+1} under ``annotator="calibrated"``. Slots fixed
   by client agents (the PettingZoo view) speak or stay silent as given.
2. **What they say.** Each speaker's persona (:mod:`rescue_env.llm.personas`: name, role, the
   transcript so far, their private emotion and views) answers in JSON: utterance, utterance
   type, addressee, emotion, intensity 1-10, and a stance toward each other member
   (viewpoint, attitude, valence −1..1). Speakers the therapist addressed in this move answer
   it together, concurrently; any other speaker answers after them, hearing what was said.
   Policy-driven slots chose their turn before the step, so they answer in the first round.
3. **State.** A speaker's distress becomes ``distress_of(emotion, intensity)`` and their
   stance row takes the reported valences (s_t^i and G_t from self-reports). Silent members,
   and stance entries a speaker did not report, keep the calibrated transition's values
   (therapist effect, bucket and ripple effects), so a member the therapist addressed moves
   even when someone else answers. The env writes the result into the core, which books
   σ* and builds the observation as for the calibrated model.
4. **Pattern.** ``annotator="calibrated"``: the transition's draw;
   ``annotator="llm"``: an :class:`~rescue_env.llm.annotator.LLMAnnotator` call over the
   latest turns.

Rows come out in the benchmark schema as with the calibrated model: the backend returns
:class:`~rescue_env.dynamics.base.ClientTurn` objects carrying text and self-reports, and the
:class:`~rescue_env.session.Session` writes the rows.

:meth:`LLMBackend.arespond` is a coroutine: ``GroupSupportEnv.astep`` awaits it, so many
episodes run concurrently on one event loop (:func:`rescue_env.rollout.arun_episode`);
``GroupSupportEnv.step`` runs it to completion. A call that fails for good raises
:class:`~rescue_env.llm.errors.LLMCallFailed`; the episode runners record the episode as
failed with its reason.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import weakref
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from rescue_env.concurrency import call_blocking
from rescue_env.data.schema import THERAPIST, Dialogue
from rescue_env.dynamics.base import Behaviour, ClientTurn, TherapistMove
from rescue_env.dynamics.params import DynamicsParams, ScenarioParams
from rescue_env.llm import prompts
from rescue_env.llm.annotator import LLMAnnotator
from rescue_env.llm.client import LLMClient
from rescue_env.llm.config import LLMConfig
from rescue_env.llm.errors import LLMCallFailed
from rescue_env.llm.personas import EpisodeMemory
from rescue_env.llm.tokens import Prompt
from rescue_env.state import GroupState, distress_of
from rescue_env.taxonomy.labels import UTTERANCE_TYPES

if TYPE_CHECKING:
    from rescue_env.envs.pz_env import GroupSupportParallelEnv
    from rescue_env.session import Session

log = logging.getLogger("rescue_env.llm")

T = TypeVar("T")

#: Values of ``dynamics.annotator``.
ANNOTATORS = ("calibrated", "llm")


def client_from_config(llm: Any) -> LLMClient:
    """An :class:`LLMClient` from the ``llm`` config group (a DictConfig, a dict or an
    :class:`LLMConfig`); keys that are not ``LLMConfig`` fields are ignored."""
    if isinstance(llm, LLMConfig):
        return LLMClient(llm)
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(llm, DictConfig):
            llm = OmegaConf.to_container(llm, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf ships with hydra
        pass
    known = set(inspect.signature(LLMConfig).parameters)
    return LLMClient(LLMConfig(**{k: v for k, v in dict(llm or {}).items() if k in known}))


@dataclass
class ClientAnswer:
    """One client turn as the persona answered it (validated and mapped to slots)."""

    slot: int
    utterance: str
    utterance_type: str
    addressee: int
    emotion: str
    intensity: int
    #: (other member's slot, viewpoint, attitude, valence)
    stances: list[tuple[int, str, str, float]] = field(default_factory=list)

    def turn(self) -> ClientTurn:
        stances = [(j, viewpoint, attitude) for j, viewpoint, attitude, _ in self.stances]
        return ClientTurn(self.slot, self.utterance_type, self.addressee, self.utterance, self.emotion, float(self.intensity), stances)


@dataclass
class _Outcome:
    answers: list[ClientAnswer]
    pattern: str | None
    lines: list[str]


class LLMBackend:
    """Client backend whose clients are LLM personas (see the module docstring).

    Args:
        scenario: ``"couple"`` or ``"family"``.
        client: the run's :class:`LLMClient` (one per run: it bounds concurrency).
        params: calibrated-model parameters of the transition that precedes the clients'
            answers (packaged defaults when None; the env's ``params`` win when given).
        annotator: ``"calibrated"`` (the transition's pattern draw) or ``"llm"``.
        window: transcript lines a persona or the annotator sees (the most recent).
    """

    name = "llm"

    def __init__(
        self,
        scenario: str,
        client: LLMClient,
        *,
        params: DynamicsParams | ScenarioParams | str | None = None,
        annotator: str = "calibrated",
        window: int = 16,
    ) -> None:
        if annotator not in ANNOTATORS:
            raise ValueError(f"annotator must be one of {ANNOTATORS}, not {annotator!r} (dynamics.annotator)")
        self.scenario = scenario
        self.client = client
        self.params = params
        self.annotator = annotator
        self.llm_annotator = LLMAnnotator(client, scenario, window=window) if annotator == "llm" else None
        self.window = window
        self._memories: dict[int, EpisodeMemory] = {}

    def __repr__(self) -> str:
        return f"LLMBackend(scenario={self.scenario!r}, annotator={self.annotator!r}, client={self.client!r})"

    def close(self) -> None:
        """Close the client's connections (``GroupSupportEnv.close`` calls this)."""
        aclose = getattr(self.client, "aclose", None)
        if aclose is not None:  # the client reconnects if it is used again
            call_blocking(aclose())

    # episode memory ---------------------------------------------------------------------------
    def attach(self, session: Session, *, tag: str | None = None) -> EpisodeMemory:
        """Start the personas of ``session``'s episode from its seed dialogue and cut; ``tag``
        accounts the episode's calls under ``client.usage(tag)``. Without it the memory is
        made at the episode's first step (untagged)."""
        memory = EpisodeMemory(session.state, session.dialogue, session.start_row, session=session, tag=tag)
        return self._remember(session, memory)

    def memory(self, session: Session) -> EpisodeMemory:
        """The episode memory of ``session`` (made on first sight)."""
        memory = self._memories.get(id(session))
        if memory is None:
            memory = self.attach(session)
        return memory

    def _remember(self, session: Session, memory: EpisodeMemory) -> EpisodeMemory:
        key = id(session)
        if key not in self._memories:
            # forget the episode with its session (ids are reused after collection)
            weakref.finalize(session, self._memories.pop, key, None)
        self._memories[key] = memory
        return memory

    # the step -----------------------------------------------------------------------------------
    async def arespond(
        self,
        session: Session,
        move: TherapistMove,
        planned: list[ClientTurn],
        *,
        pattern_before: str | None,
        seed: int,
        behaviours: dict[int, Behaviour | None] | None = None,
    ) -> list[ClientTurn]:
        """The speakers ``planned`` by the calibrated transition answer as their personas;
        their self-reports overwrite ``session.state`` (which holds the transition's result)
        in place, and the pattern too under ``annotator="llm"``. Returns the client turns with
        their text. ``seed`` seeds the step's LLM calls when the client config asks for seeds."""
        memory = self.memory(session)
        outcome = await self._compute(memory, session.state, move, planned, pattern_before, seed, behaviours)
        return self._apply(session.state, memory, outcome)

    async def _compute(
        self,
        memory: EpisodeMemory,
        state: GroupState,
        move: TherapistMove,
        planned: list[ClientTurn],
        pattern_before: str | None,
        base_seed: int,
        behaviours: dict[int, Behaviour | None] | None,
    ) -> _Outcome:
        history = memory.history()
        lines: list[str] = []
        if move.intervene:
            # as the session's row will render it, so the next call's transcript extends this one's
            target = memory.group_label if len(move.slots) == state.n > 1 else ", ".join(memory.members[i] for i in move.slots)
            lines.append(prompts.line(THERAPIST, target, move.text or f"[a {move.strategy_name} move]", move.strategy_name or ""))
        fixed = behaviours or {}
        addressed = set(move.slots) if move.intervene else set()
        first = [t for t in planned if t.slot in fixed or t.slot in addressed] or planned[:1]
        rest = [t for t in planned if t.slot not in {f.slot for f in first}]

        async def answer(turn: ClientTurn, heard: list[str], cue: str) -> ClientAnswer:
            pre = memory.pre_answers.pop(turn.slot, None)
            behaviour = fixed.get(turn.slot)
            if pre is not None and pre[0] == memory.step and behaviour is not None:
                ready: ClientAnswer = pre[1]
                if (UTTERANCE_TYPES.index(ready.utterance_type), ready.addressee) == (behaviour.utterance_type, behaviour.addressee):
                    return ready
            seed = None if self.client.config.seed is None else (base_seed + turn.slot) % (2**31 - 1)
            answer = await self.ask(memory, turn.slot, history + heard, cue, behaviour=behaviour, seed=seed)
            assert answer is not None  # no speak choice: always an answer
            return answer

        def cue_for(slot: int, after_others: bool) -> str:
            if slot in fixed and fixed[slot] is not None:
                b = fixed[slot]
                return f"Your turn now is a {UTTERANCE_TYPES[b.utterance_type]} addressed to {memory.label_of(b.addressee)}: say it in your own words."  # type: ignore[union-attr]
            if slot in addressed:
                return "The therapist has just spoken to you. Answer now, as yourself."
            if after_others:
                return "It is your turn to speak: respond to what was just said."
            return "It is your turn to speak."

        if len(first) == 1:
            answers = [await answer(first[0], lines, cue_for(first[0].slot, False))]
        else:  # they answer the same moment: concurrently
            results = await asyncio.gather(*(answer(t, lines, cue_for(t.slot, False)) for t in first), return_exceptions=True)
            for r in results:
                if isinstance(r, BaseException):
                    raise r
            answers = list(results)  # type: ignore[arg-type]
        lines += [self._line(memory, a) for a in answers]
        for t in rest:
            a = await answer(t, list(lines), cue_for(t.slot, True))
            answers.append(a)
            lines.append(self._line(memory, a))

        pattern = state.pattern
        if self.llm_annotator is not None and lines:
            seed = None if self.client.config.seed is None else (base_seed + state.n) % (2**31 - 1)
            pattern = await self.llm_annotator.label(memory.members, history + lines, pattern_before, seed=seed, tag=memory.tag)
        elif self.llm_annotator is not None:
            pattern = pattern_before  # nothing was said: nothing to re-label
        return _Outcome(answers, pattern, lines)

    @staticmethod
    def _line(memory: EpisodeMemory, a: ClientAnswer) -> str:
        return prompts.line(memory.members[a.slot], memory.label_of(a.addressee), a.utterance, a.utterance_type)

    def _apply(self, state: GroupState, memory: EpisodeMemory, outcome: _Outcome) -> list[ClientTurn]:
        distress = state.distress.copy()
        stance = state.stance.copy()
        for a in outcome.answers:
            distress[a.slot] = distress_of(a.emotion, a.intensity)
            persona = memory.personas[a.slot]
            persona.emotion, persona.intensity = a.emotion, float(a.intensity)
            for j, viewpoint, attitude, valence in a.stances:
                stance[a.slot, j] = valence
                persona.views[j] = (viewpoint, attitude)
            state.emotion[a.slot] = a.emotion
            state.intensity[a.slot] = float(a.intensity)
        np.fill_diagonal(stance, 0.0)
        state.distress = np.clip(distress, 0.0, 1.0)
        state.stance = np.clip(stance, -1.0, 1.0)
        state.pattern = outcome.pattern
        memory.lines.extend(outcome.lines)
        memory.step += 1
        return [a.turn() for a in outcome.answers]

    # one persona call -----------------------------------------------------------------------
    async def ask(
        self,
        memory: EpisodeMemory,
        slot: int,
        history: Sequence[str],
        cue: str,
        *,
        behaviour: Behaviour | None = None,
        speak_choice: bool = False,
        seed: int | None = None,
    ) -> ClientAnswer | None:
        """Client ``slot``'s persona answers ``cue`` after ``history``. ``behaviour`` fixes the
        utterance type and addressee; ``speak_choice`` lets the persona stay silent (None).
        Raises :class:`LLMCallFailed` when the call fails for good."""
        persona = memory.personas[slot]
        members = memory.members
        others = [m for i, m in enumerate(members) if i != slot]
        addressees = memory.addressees(slot)
        types: Sequence[str] = UTTERANCE_TYPES
        if behaviour is not None:
            types = [UTTERANCE_TYPES[behaviour.utterance_type]]
            addressees = [memory.label_of(behaviour.addressee)]
        schema = prompts.client_turn_schema(others, addressees, utterance_types=types, speak_choice=speak_choice)
        private = persona.private_state(members, memory.stance_row(slot))
        tail = prompts.persona_tail(persona.name, persona.role, private, cue, memory.group_label)
        prompt = Prompt(lambda window: prompts.session_messages(memory.scenario, members, history, window, tail), self.window)
        result = await self.client.complete_json(prompt, schema, name="client_turn", seed=seed, tag=memory.tag)
        if not result.ok or result.data is None:
            raise LLMCallFailed(f"client {persona.name}", result.error)
        data = result.data
        if speak_choice and not data["speak"]:
            return None
        stances: list[tuple[int, str, str, float]] = []
        for item in data["stances"]:
            j = members.index(item["target"]) if item["target"] in members else -1
            if j < 0 or j == slot or any(s[0] == j for s in stances):
                continue
            stances.append((j, item["viewpoint"].strip(), item["attitude"].strip(), float(min(1.0, max(-1.0, item["valence"])))))
        return ClientAnswer(
            slot=slot,
            utterance=data["utterance"].strip(),
            utterance_type=data["utterance_type"],
            addressee=memory.addressee_of(data["addressee"], slot),
            emotion=data["emotion"].strip() or "unsure",
            intensity=int(min(10, max(1, round(data["intensity"])))),
            stances=stances,
        )




class LLMClientPolicy:
    """Drives client agent ``client_{slot}`` of the PettingZoo ``ParallelEnv`` with its LLM
    persona: each step the persona decides whether to speak and, if so, answers in full
    (utterance, type, addressee, emotion, stances); :meth:`act` returns the agent's flat
    action. When the env's backend is this policy's backend, the step then uses the
    persona's own words and self-report for that slot (no second call).

    Clients choose simultaneously, before the therapist's move of the step (the env's
    contract), so the persona hears the transcript up to the previous step. With another
    backend (e.g. calibrated), give the env ``record_transcript=True`` so the personas hear
    the session; only the utterance type and addressee then reach the env.

    Args:
        env: the ``ParallelEnv`` (its current session is used at each call).
        slot: the client's member slot.
        backend: the persona backend (default: ``env.backend``, which must be an LLMBackend).
    """

    def __init__(self, env: GroupSupportParallelEnv, slot: int, backend: LLMBackend | None = None) -> None:
        backend = backend if backend is not None else env.backend  # type: ignore[assignment]
        if not isinstance(backend, LLMBackend):
            raise TypeError("LLMClientPolicy needs an LLMBackend: build the env with dynamics=LLMBackend(...) or pass backend=")
        self.env = env
        self.slot = slot
        self.backend = backend
        self.agent = f"client_{slot}"
        #: actions masked out by the env (played as silence instead)
        self.invalid = 0

    def _memory(self) -> EpisodeMemory:
        session = self.env.session
        if session is None:
            raise RuntimeError("reset() the env before asking its client policies")
        return self.backend.memory(session)

    async def aact(self, observation: Any = None, action_mask: np.ndarray | None = None) -> int:
        """The client's flat action for this step (0 = silent), as a coroutine."""
        memory = self._memory()
        cue = (
            "Decide whether you say something now (speak true) or stay silent (speak false). "
            "If you speak, say it; when silent, the other fields are ignored."
        )
        seed = None if self.backend.client.config.seed is None else (memory.step * 101 + self.slot) % (2**31 - 1)
        answer = await self.backend.ask(memory, self.slot, memory.history(), cue, speak_choice=True, seed=seed)
        if answer is None:
            return 0
        action = self.env.client_action(answer.utterance_type, answer.addressee)
        if action_mask is not None and not action_mask[action]:
            self.invalid += 1
            return 0
        memory.pre_answers[self.slot] = (memory.step, answer)
        return action

    def act(self, observation: Any = None, action_mask: np.ndarray | None = None) -> int:
        """The client's flat action for this step (0 = silent)."""
        return call_blocking(self.aact(observation, action_mask))


def llm_client_policies(env: GroupSupportParallelEnv, backend: LLMBackend | None = None) -> dict[str, LLMClientPolicy]:
    """One :class:`LLMClientPolicy` per client agent of the env's current episode."""
    if env.session is None:
        raise RuntimeError("reset() the env first: the client agents depend on the episode's group")
    return {f"client_{i}": LLMClientPolicy(env, i, backend) for i in range(env.session.n)}


async def aclient_actions(policies: dict[str, LLMClientPolicy], observations: dict[str, Any]) -> dict[str, int]:
    """Every policy's action for this step, asked concurrently."""
    agents = [a for a in policies if a in observations]
    actions = await asyncio.gather(
        *(policies[a].aact(observations[a]["observation"], observations[a]["action_mask"]) for a in agents)
    )
    return dict(zip(agents, actions))


def client_actions(policies: dict[str, LLMClientPolicy], observations: dict[str, Any]) -> dict[str, int]:
    """Synchronous :func:`aclient_actions`."""
    return call_blocking(aclient_actions(policies, observations))
