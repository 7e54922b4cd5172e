"""What every env adapter is built from: seed data and start states, parameters, the client
model, spaces, reset options and action checks (:class:`Simulation`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Sequence

import numpy as np
from gymnasium import spaces

from rescue_env.data.groups import check_group_sizes
from rescue_env.data.loader import load_dialogues, resolve_data_path
from rescue_env.data.schema import Dialogue
from rescue_env.config import EnvSpec
from rescue_env.concurrency import call_blocking
from rescue_env.core import Core, StartTable, move_codes, observation_layout, turn_codes, write_observation
from rescue_env.data.schema import Row
from rescue_env.dynamics.base import Behaviour, ClientBackend, ClientTurn, TherapistMove
from rescue_env.dynamics.calibrated import CalibratedModel
from rescue_env.dynamics.params import scenario_params
from rescue_env.dynamics.text import TextBank
from rescue_env.reward import RewardConfig
from rescue_env.session import Session
from rescue_env.state import GroupState
from rescue_env.taxonomy.actions import ActionEncoding
from rescue_env.taxonomy.labels import UTTERANCE_TYPES
from rescue_env.taxonomy.labels import patterns as scenario_patterns


@lru_cache(maxsize=8)
def _cached_dialogues(path: str) -> tuple[Dialogue, ...]:
    # Dialogues are read-only inputs; sharing them across vectorised envs saves the parse.
    return tuple(load_dialogues(path))


@lru_cache(maxsize=8)
def _cached_bank(path: str, scenario: str) -> TextBank:
    return TextBank([d for d in _cached_dialogues(path) if d.scenario == scenario])


def seed_dialogues(data: str | Sequence[Dialogue] | None, scenario: str) -> tuple[list[Dialogue], TextBank]:
    """Seed dialogues of ``scenario`` from a path (bundled seeds when ``None``), a list of
    paths, or a list of :class:`Dialogue`, with the retrieval corpus built from them."""
    if data is None or isinstance(data, (str, os.PathLike)):
        key = str(resolve_data_path(data))
        dialogues = [d for d in _cached_dialogues(key) if d.scenario == scenario]
        bank = _cached_bank(key, scenario)
    else:
        items = list(data)
        if items and all(isinstance(x, (str, os.PathLike)) for x in items):
            items = load_dialogues(items)  # several data files or directories
        dialogues = [d for d in items if d.scenario == scenario]
        bank = TextBank(dialogues)
    if not dialogues:
        raise ValueError(f"no {scenario} dialogue in the seed data ({data or 'bundled seeds'}); point data_path at a data set with {scenario} sessions")
    return dialogues, bank


@lru_cache(maxsize=16)
def _cached_starts(key: str, scenario: str, cap: int, min_prefix: int) -> StartTable:
    dialogues = [d for d in _cached_dialogues(key) if d.scenario == scenario]
    return StartTable(dialogues, scenario_patterns(scenario), cap, min_prefix)


class Simulation:
    """What an env is built from (an :class:`~rescue_env.config.EnvSpec`: settings, seed
    data, the client model, the reward) made ready: start states, the calibrated parameters,
    the action encoding, spaces. Every adapter makes one, then a
    :class:`~rescue_env.core.Core` of its size with :meth:`core`, and plays a single session's
    steps with :meth:`step` / :meth:`astep`."""

    def __init__(self, spec: EnvSpec):
        self.spec = spec
        self.config = config = spec.config
        self.heterogeneity = spec.heterogeneity
        dynamics, params, data_path, reward = spec.dynamics, spec.params, spec.data_path, spec.reward
        scenario = config.scenario
        if isinstance(dynamics, str):
            if dynamics != "calibrated":
                raise ValueError(f"unknown dynamics {dynamics!r}: use 'calibrated', or pass a client-model object (e.g. an LLMBackend)")
            dynamics = None
        elif not isinstance(dynamics, ClientBackend):
            raise TypeError(f"dynamics must be 'calibrated' or a client model with arespond() (a ClientBackend: an LLMBackend), got {type(dynamics).__name__}")
        elif params is None:
            params = getattr(dynamics, "params", None)
        self.params = scenario_params(params, scenario)
        #: the client model: the calibrated one (its turns are the core's transition) or another
        #: :class:`ClientBackend` (LLM clients) answering after the transition
        self.clients: ClientBackend = dynamics if dynamics is not None else CalibratedModel(scenario, self.params, heterogeneity=self.heterogeneity)
        #: the client model other than the calibrated one (an LLM backend), or ``None``
        self.backend = None if isinstance(self.clients, CalibratedModel) else self.clients
        self.encoding = ActionEncoding(scenario, config.max_members)
        self.dialogues, self.text_bank = seed_dialogues(data_path, scenario)
        # a group larger than the spaces is refused by name: members are never dropped
        check_group_sizes(self.dialogues, self.encoding.max_members)
        if not isinstance(reward, RewardConfig):
            reward = RewardConfig(**(reward or {}))
        self.reward = reward
        cap = self.encoding.max_members
        if tuple(self.params.patterns) != tuple(scenario_patterns(scenario)):
            raise ValueError(f"parameters list the patterns {self.params.patterns}, the {scenario} taxonomy has {scenario_patterns(scenario)}")
        if data_path is None or isinstance(data_path, (str, os.PathLike)):
            self.starts = _cached_starts(str(resolve_data_path(data_path)), scenario, cap, config.min_prefix)
        else:
            self.starts = StartTable(self.dialogues, scenario_patterns(scenario), cap, config.min_prefix)
        self.observer = Observer(self.encoding, scenario_patterns(scenario), config.horizon)
        self._action = np.zeros(1, np.int64)

    def set_horizon(self, core: Core, horizon: int) -> None:
        """A new horizon for ``core`` (made by :meth:`core`): the config, the core's episode
        end and the observation's ``tempo`` follow."""
        self.config = c = self.config.replace(horizon=horizon)
        core.set_episode_end(c)
        self.observer.horizon = c.horizon

    def core(self, num_sessions: int) -> Core:
        """A core of ``num_sessions`` sessions over this simulation."""
        c = self.config
        core = Core(self.params, self.encoding, self.reward, self.starts, num_sessions, episode_end=c, heterogeneity=self.heterogeneity)
        if self.backend is not None:
            core.set_reading_noise(0.0)  # LLM clients' self-reports are the readings: no second noise
        return core


    # one session's step (the Gymnasium and PettingZoo envs) ----------------------------------
    def step(self, core: Core, session: Session, action: int, *, text: str = "", behaviours: dict[int, Behaviour | None] | None = None) -> Step:
        """Play the checked flat ``action`` in session 0 of ``core`` (an N = 1 core), whose
        episode ``session`` views: the client model answers (``behaviours`` fix client
        agents' turns: ``{slot: Behaviour}``, ``{slot: None}`` silent), σ* is booked, the
        session's state and transcript follow. An LLM client model's calls run to completion
        here; :meth:`astep` awaits them."""
        move, before = self._move(session, action, text)
        if self.backend is None:  # the calibrated model: the whole step in one kernel call
            turns = self._calibrated(core, action, behaviours)
        else:
            turns = call_blocking(self._respond(core, session, action, move, before, behaviours))
        return self._after(core, session, move, turns, before)

    async def astep(self, core: Core, session: Session, action: int, *, text: str = "", behaviours: dict[int, Behaviour | None] | None = None) -> Step:
        """:meth:`step` as a coroutine: an LLM client model's calls are awaited."""
        move, before = self._move(session, action, text)
        if self.backend is None:
            turns = self._calibrated(core, action, behaviours)
        else:
            turns = await self._respond(core, session, action, move, before, behaviours)
        return self._after(core, session, move, turns, before)

    def _move(self, session: Session, action: int, text: str) -> tuple[TherapistMove | None, str | None]:
        """The decoded move, only where text is built (a transcript, LLM clients)."""
        move = session.move_for(action, text)[0] if (self.config.record_transcript or self.backend is not None) else None
        return move, session.state.pattern

    def _calibrated(self, core: Core, action: int, behaviours: dict[int, Behaviour | None] | None) -> list[ClientTurn]:
        self._action[0] = action
        with core.behaving(0, behaviours):
            core.step(self._action)
        return _turns_of(core) if self.config.record_transcript else []

    async def _respond(self, core: Core, session: Session, action: int, move: TherapistMove, before: str | None, behaviours: dict[int, Behaviour | None] | None) -> list[ClientTurn]:
        """The client model's step: the calibrated transition says who speaks (and moves the
        silent members), the speakers' answers set their distress and stances, then σ*."""
        self._action[0] = action
        with core.behaving(0, behaviours):
            core.transition(self._action)
        session.state = core.state_view(0, session.state)
        turns = await self.clients.arespond(session, move, _turns_of(core), pattern_before=before, seed=core.step_seed(0), behaviours=behaviours or None)
        st = session.state
        core.set_state(0, distress=st.distress, stance=st.stance, pattern=st.pattern)
        core.set_turns(0, [(t.slot, UTTERANCE_TYPES.index(t.utterance_type), t.addressee) for t in turns])
        core.finish()
        return turns

    def _after(self, core: Core, session: Session, move: TherapistMove | None, turns: list[ClientTurn], before: str | None) -> Step:
        session.t = core.steps(0)
        # a new state object per step: one handed out earlier is not changed by later steps
        session.state = core.state_view(0, session.state)
        return Step(move, turns, session.record_step(move, turns, before))


@dataclass
class Step:
    """What one step of a session did (:meth:`Simulation.step`): the therapist's decoded move
    (``None`` where nothing builds text), the client turns (empty where nothing records them)
    and the new transcript rows (empty when not recording)."""

    move: TherapistMove | None
    turns: list[ClientTurn] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)


def _turns_of(core: Core) -> list[ClientTurn]:
    return [ClientTurn(slot, UTTERANCE_TYPES[utype], addressee) for slot, utype, addressee in core.turns(0)]


def episode_key(np_random: np.random.Generator) -> int:
    """An episode key drawn from an env's seeded generator (the first episode after
    ``reset(seed=...)``; later ones chain from it)."""
    return int(np_random.integers(0, 2**63, dtype=np.uint64))


def start_options(starts: StartTable, options: dict[str, Any] | None) -> tuple[int, int]:
    """``reset`` options as (dialogue index, cut row), ``-1`` for "draw it":
    ``{"dialogue": sample_id, "start_row": k}`` may fix either; other keys are ignored, as
    gymnasium envs do (PettingZoo's API test passes some)."""
    options = options or {}
    dialogue = starts.index_of(options["dialogue"]) if "dialogue" in options else -1
    row = -1
    if "start_row" in options:
        row = options["start_row"]
        if isinstance(row, (bool, np.bool_)) or not isinstance(row, (int, np.integer)):
            raise ValueError(f"reset option start_row must be an integer row count, got {row!r} ({type(row).__name__})")
        row = int(row)
        if dialogue < 0:
            raise ValueError("reset option 'start_row' needs 'dialogue' too (cut rows differ between dialogues)")
        n_rows = len(starts.dialogues[dialogue].rows)
        if not 0 <= row <= n_rows:
            raise ValueError(f"start_row={row} outside 0..{n_rows} for {starts.dialogues[dialogue].sample_id!r}")
    return dialogue, row


def check_action(action: Any, n_actions: int, space: Any) -> int:
    """``action`` as an ``int`` in ``0..n_actions-1``; ``ValueError`` naming the space
    otherwise: not an integer (floats with a fraction, strings, booleans of any kind, arrays
    of several values) or out of range (the message gives the range)."""
    if isinstance(action, (bool, np.bool_)) or (isinstance(action, np.ndarray) and action.dtype == np.bool_):
        raise ValueError(f"action {action!r} is a boolean, not an integer in {space}")
    try:
        a = int(action)
    except (TypeError, ValueError):
        raise ValueError(f"action {action!r} is not an integer in {space}") from None
    if isinstance(action, str) or a != action:
        raise ValueError(f"action {action!r} is not an integer in {space}")
    if not 0 <= a < n_actions:
        raise ValueError(f"action {action!r} is out of range: {space} takes 0..{n_actions - 1}")
    return a


class Observer:
    """The padded ``Dict`` observation space and its flat layout (see the Gym env's docstring)."""

    def __init__(self, encoding: ActionEncoding, patterns: Sequence[str], horizon: int):
        self.cap = encoding.max_members
        self.n_strategies = encoding.n_strategies
        self.patterns = tuple(patterns)
        self._index = {p: i for i, p in enumerate(self.patterns)}
        self.horizon = horizon
        layout = observation_layout(self.cap, len(self.patterns), encoding.n_strategies)
        # stances lie in [-1, 1], everything else in [0, 1]
        self.space = spaces.Dict({key: spaces.Box(-1.0 if key == "stance" else 0.0, 1.0, shape, np.float32) for key, shape in layout.items()})
        # The flat layout is gymnasium's ``spaces.flatten`` of the Dict (keys in sorted order),
        # so a policy trained on the vector envs' flat vectors acts on ``flatten(space, obs)``;
        # the core writes the parts in that order
        self.flat_space = spaces.flatten_space(self.space)
        assert list(self.space.spaces) == list(layout)
        self._slices: dict[str, tuple[slice, tuple[int, ...]]] = {}
        start = 0
        for key, box in self.space.spaces.items():
            size = int(np.prod(box.shape))
            self._slices[key] = (slice(start, start + size), box.shape)
            start += size

    def columns(self, key: str) -> slice:
        """The columns of the flat observation that hold ``key`` of the ``Dict`` one."""
        return self._slices[key][0]

    def unflatten(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """The ``Dict`` observation of a flat one (views of one copy of ``flat``; only the
        stance matrix is reshaped: a reshape per key was half of this call)."""
        flat = flat.copy()
        return {key: flat[sl] if len(shape) == 1 else flat[sl].reshape(shape) for key, (sl, shape) in self._slices.items()}

    def unflatten_batch(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """The batched ``Dict`` observation of ``(N, D)`` flat ones: ``(N, *shape)`` views of
        one copy of ``flat`` (strided, not contiguous: one copy of the block costs a fifth
        of six strided copies)."""
        flat = flat.copy()
        n = flat.shape[0]
        return {key: flat[:, sl] if len(shape) == 1 else flat[:, sl].reshape(n, *shape) for key, (sl, shape) in self._slices.items()}

    def flatten(self, observation: dict[str, np.ndarray]) -> np.ndarray:
        """A ``Dict`` observation as the flat vector a flat-observation policy takes
        (gymnasium's ``spaces.flatten``)."""
        return spaces.flatten(self.space, observation)

    def observe_state(self, st: GroupState, t: int = 0, streak: int = 0) -> dict[str, np.ndarray]:
        """The observation of a bare state (e.g. one extracted from a real dialogue)."""
        cap, n = self.cap, st.n
        d = np.zeros(cap)
        d[:n] = st.distress
        g = np.zeros((cap, cap))
        g[:n, :n] = st.stance
        unt = np.zeros(cap, np.int64)
        unt[:n] = st.untended
        k = self._index.get(st.pattern, len(self.patterns)) if st.pattern else len(self.patterns)
        flat = np.zeros((1, *self.flat_space.shape), np.float32)
        client, spoken_to, utterance = turn_codes(st, cap)
        strategy, addressed = move_codes(st)
        write_observation(
            flat, 0, d[None], g[None], n, k, t, streak, unt[None], float(self.horizon), len(self.patterns),
            client, spoken_to, utterance, len(UTTERANCE_TYPES), strategy, addressed, self.n_strategies,
        )  # fmt: skip
        return self.unflatten(flat[0])
