"""The LLM therapist (``agent=llm``): an LLM decides each move through any OpenAI-compatible
server.

Each step it sees the transcript window (the last ``window`` rows of the session it is
attached to, strategy labels shown) and, with ``show_state=True``, a summary of the group
state (pattern, each member's distress, emotion and untended turns, the stance matrix). It
answers in JSON: ``intervene``, ``target`` and ``strategy`` (enums of the group's valid
targets and the scenario's strategies), ``utterance`` and ``reason``. The utterance becomes
the therapist row's text (the rollout runners pass it to the session).

Failures: a reply that stays unusable after the client's one re-ask (schema violation, not
JSON), or a target the mask forbids, is a **fallback** to keeping listening, counted in
``fallbacks`` / ``episode_fallbacks``, never an exception. A call that gets no reply at all
(the server keeps failing after the retries) raises
:class:`~rescue_env.llm.errors.LLMCallFailed`: the runners record the episode as failed.

``rank(state, encoding)`` asks for a speak probability and the top-3 targets and strategies,
so the static tasks (ITP, STP, SSP) can score the LLM therapist through the agent protocol.
"""

from __future__ import annotations

import math
import weakref
from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np

from rescue_env.agents.base import Ranking
from rescue_env.llm import prompts
from rescue_env.concurrency import call_blocking
from rescue_env.llm.backend import client_from_config
from rescue_env.llm.client import LLMClient, LLMResult
from rescue_env.llm.config import LLMConfig
from rescue_env.llm.errors import LLMCallFailed
from rescue_env.llm.tokens import Prompt
from rescue_env.state import GroupState
from rescue_env.taxonomy.actions import ActionEncoding

if TYPE_CHECKING:
    from rescue_env.session import Session

#: Weights given to a ranked answer's first, second and third choice.
RANK_WEIGHTS = (0.6, 0.25, 0.15)
#: Mass each unranked valid option keeps, so rankings stay complete.
UNRANKED_MASS = 1e-3
#: Error prefixes of the client layer for replies the model got wrong (vs no reply at all).
_MODEL_ERRORS = ("schema violation", "the reply is not a JSON object")


def _model_side(result: LLMResult) -> bool:
    """The call failed on the model's answer (fallback), not on the server (episode fails)."""
    return result.error.startswith(_MODEL_ERRORS)


def state_summary(state: GroupState) -> str:
    """The group state in words for the therapist's prompt."""
    worst = state.worst_off()
    lines = [
        "Group state (the simulator's estimate; distress 0 = calm to 1 = most distressed):",
        f"- relation pattern: {state.pattern or 'no clear pattern'}",
    ]
    for i, member in enumerate(state.members):
        intensity = float(state.intensity[i])
        feels = f", feels {state.emotion[i]} ({intensity:g}/10)" if state.emotion[i] and not math.isnan(intensity) else ""
        mark = " (most distressed)" if i == worst else ""
        lines.append(f"- {member}: distress {state.distress[i]:.2f}{feels}, not addressed for {int(state.untended[i])} turns{mark}")
    stance = state.stance.tolist()  # plain floats format much faster than numpy scalars
    pairs = [f"{a}->{b} {stance[i][j]:+.2f}" for i, a in enumerate(state.members) for j, b in enumerate(state.members) if i != j]
    if pairs:
        lines.append(f"- stances (-1 hostile to +1 warm): {'; '.join(pairs)}")
    return "\n".join(lines)


class LLMTherapist:
    """Therapist agent backed by an LLM (see the module docstring).

    Args:
        scenario: ``"couple"`` or ``"family"``.
        encoding: the action encoding (default for the scenario).
        client: the run's :class:`LLMClient` (shared with the client personas); built from
            ``llm`` when None.
        llm: an :class:`LLMConfig` or a dict of its fields (used when ``client`` is None).
        window: transcript rows shown (the most recent).
        show_state: add the group-state summary to the prompt.
        name: the label in reports.
    """

    def __init__(
        self,
        scenario: str,
        encoding: ActionEncoding | None = None,
        *,
        client: LLMClient | None = None,
        llm: LLMConfig | dict[str, Any] | None = None,
        window: int = 16,
        show_state: bool = True,
        name: str = "llm",
    ) -> None:
        self.scenario = scenario
        self.encoding = encoding or ActionEncoding(scenario)
        self.client = client if client is not None else client_from_config(llm or LLMConfig())
        self.window = int(window)
        self.show_state = bool(show_state)
        self.name = name
        #: calls made and fallbacks to listening over the agent's life, with their reasons
        self.calls = 0
        self.fallbacks = 0
        self.fallback_reasons: Counter[str] = Counter()
        #: fallbacks since the last reset (one episode)
        self.episode_fallbacks = 0
        #: what the therapist says with its last action ("" when listening)
        self.utterance = ""
        #: the model's reason for its last action
        self.reason = ""
        self._seed: int | None = None
        self._t = 0
        self._session: weakref.ref[Session] | None = None
        self._tag: str | None = None
        self._rendered = prompts.RenderedRows(strategies=True)

    def __repr__(self) -> str:
        return f"LLMTherapist(scenario={self.scenario!r}, client={self.client!r})"

    # episode ------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None) -> None:
        self._seed = seed
        self._t = 0
        self.episode_fallbacks = 0
        self.utterance = self.reason = ""
        self._session = None
        self._tag = None

    def attach(self, session: Session, *, tag: str | None = None) -> None:
        """Read the transcript of ``session`` (it must record rows); ``tag`` accounts the
        agent's calls under ``client.usage(tag)``. Runners call this after ``reset``."""
        self._session = weakref.ref(session)
        self._tag = tag

    def _lines(self) -> list[str] | None:
        """The transcript lines so far (None when the session records no transcript)."""
        session = self._session() if self._session is not None else None
        if session is None or not session.record:
            return None
        return self._rendered.lines(session.rows)

    def _seed_for_call(self) -> int | None:
        base = self.client.config.seed
        if base is None:
            return None
        return (base + (self._seed or 0) * 1009 + self._t) % (2**31 - 1)

    def _messages(self, state: GroupState, encoding: ActionEncoding, *, rank: bool) -> Prompt:
        """The therapist's prompt: the session's shared part (the same as its client personas',
        :func:`~rescue_env.llm.prompts.session_messages`), then its own tail; its transcript
        window shrinks if the model's context is small."""
        lines = self._lines()
        summary = state_summary(state) if self.show_state or lines is None else None
        tail = prompts.therapist_tail(summary, rank=rank)
        shown = ["(transcript not available)"] if lines is None else lines
        members = list(state.members)
        return Prompt(lambda window: prompts.session_messages(encoding.scenario, members, shown, window, tail), self.window)

    @staticmethod
    def _targets(encoding: ActionEncoding, members: list[str]) -> dict[str, int]:
        """Valid target options by label (``"Ana"``, ``"Ana & Ben"``, ``"Family"``)."""
        mask = encoding.target_mask(len(members))
        return {" & ".join(encoding.target_label(t, members)): t for t in range(encoding.n_targets) if mask[t]}

    def _fallback(self, reason: str) -> int:
        self.fallbacks += 1
        self.episode_fallbacks += 1
        self.fallback_reasons[reason] += 1
        self.utterance = ""
        return 0

    # acting -------------------------------------------------------------------------------------
    async def aact(self, observation: Any, action_mask: np.ndarray, state: GroupState | None = None) -> int:
        """The next flat action (as a coroutine); sets :attr:`utterance` and :attr:`reason`."""
        if state is None:
            raise ValueError("LLMTherapist needs the group state: pass info['state'] as act(obs, mask, state)")
        encoding = self.encoding
        targets = self._targets(encoding, list(state.members))
        schema = prompts.therapist_move_schema(list(targets), encoding.strategy_names)
        messages = self._messages(state, encoding, rank=False)
        self.calls += 1
        result = await self.client.complete_json(messages, schema, name="therapist_move", seed=self._seed_for_call(), tag=self._tag)
        self._t += 1
        self.utterance = self.reason = ""
        if not result.ok or result.data is None:
            if not _model_side(result):
                raise LLMCallFailed("therapist", result.error)
            return self._fallback("unusable reply")
        data = result.data
        self.reason = str(data.get("reason", ""))
        if not data["intervene"]:
            return 0
        target = targets.get(data["target"])
        if target is None or data["strategy"] not in encoding.strategy_names:
            return self._fallback("invalid label")
        action = encoding.encode(target, encoding.strategy_index(data["strategy"]))
        if not action_mask[action]:
            return self._fallback("masked action")
        self.utterance = str(data["utterance"]).strip()
        return action

    def act(self, observation: Any, action_mask: np.ndarray, state: GroupState | None = None) -> int:
        """The next flat action (blocks on the LLM call)."""
        return call_blocking(self.aact(observation, action_mask, state))

    # ranking ------------------------------------------------------------------------------------
    async def arank(self, state: GroupState, encoding: ActionEncoding | None = None) -> Ranking:
        """Speak probability and target/strategy distributions from the LLM's top-3 lists."""
        encoding = encoding or self.encoding
        targets = self._targets(encoding, list(state.members))
        schema = prompts.therapist_rank_schema(list(targets), encoding.strategy_names)
        messages = self._messages(state, encoding, rank=True)
        self.calls += 1
        result = await self.client.complete_json(messages, schema, name="therapist_rank", tag=self._tag)
        valid = encoding.target_mask(state.n).astype(float)
        if not result.ok or result.data is None:
            if not _model_side(result):
                raise LLMCallFailed("therapist ranking", result.error)
            self._fallback("unusable ranking")
            uniform = np.full(encoding.n_strategies, 1.0 / encoding.n_strategies)
            return Ranking(0.5, valid / valid.sum(), uniform)
        data = result.data
        target_probs = _ranked([targets[t] for t in data["targets"] if t in targets], valid)
        strategy_probs = _ranked(
            [encoding.strategy_index(s) for s in data["strategies"] if s in encoding.strategy_names], np.ones(encoding.n_strategies)
        )
        return Ranking(float(min(1.0, max(0.0, data["p_speak"]))), target_probs, strategy_probs)

    def rank(self, state: GroupState, encoding: ActionEncoding) -> Ranking:
        """Synchronous :meth:`arank` (works inside a running event loop too)."""
        return call_blocking(self.arank(state, encoding))


def _ranked(order: list[int], valid: np.ndarray) -> np.ndarray:
    """A distribution over options: ``RANK_WEIGHTS`` on the ranked ones (first mention
    counts), ``UNRANKED_MASS`` on each other valid option, normalised."""
    probs = valid * UNRANKED_MASS
    seen: list[int] = []
    for k in order:
        if k not in seen and valid[k]:
            seen.append(k)
    for weight, k in zip(RANK_WEIGHTS, seen):
        probs[k] = weight
    return probs / probs.sum()
