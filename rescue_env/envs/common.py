"""Pieces both environment adapters share: seed data, backends, observations, episode books."""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Sequence

import numpy as np
from gymnasium import spaces

from rescue_env.data.loader import load_dialogues, resolve_data_path
from rescue_env.data.schema import Dialogue
from rescue_env.dynamics.base import ClientBackend, TherapistMove
from rescue_env.dynamics.calibrated import CalibratedBackend
from rescue_env.dynamics.params import DynamicsParams
from rescue_env.dynamics.text import TextBank
from rescue_env.reward import RewardConfig, sigma_star
from rescue_env.session import Session
from rescue_env.state import GroupState
from rescue_env.taxonomy.actions import ActionEncoding
from rescue_env.taxonomy.labels import patterns as scenario_patterns


@lru_cache(maxsize=8)
def _cached_dialogues(path: str) -> tuple[Dialogue, ...]:
    # Dialogues are read-only inputs; sharing them across vectorised envs saves the parse.
    return tuple(load_dialogues(path))


@lru_cache(maxsize=8)
def _cached_bank(path: str, scenario: str) -> TextBank:
    return TextBank([d for d in _cached_dialogues(path) if d.scenario == scenario])


def seed_dialogues(data: str | Sequence[Dialogue] | None, scenario: str) -> tuple[list[Dialogue], TextBank]:
    """Seed dialogues of ``scenario`` from a path (bundled seeds when ``None``) or a list,
    with the retrieval corpus built from them."""
    if data is None or isinstance(data, str):
        key = str(resolve_data_path(data))
        dialogues = [d for d in _cached_dialogues(key) if d.scenario == scenario]
        bank = _cached_bank(key, scenario)
    else:
        dialogues = [d for d in data if d.scenario == scenario]
        bank = TextBank(dialogues)
    if not dialogues:
        raise ValueError(f"no {scenario} dialogue in the seed data ({data or 'bundled seeds'}); point data_path at a data set with {scenario} sessions")
    return dialogues, bank


def make_backend(dynamics: str | ClientBackend, scenario: str, params: DynamicsParams | str | None = None) -> ClientBackend:
    """A client backend by name (``"calibrated"``) or the instance given."""
    if not isinstance(dynamics, str):
        return dynamics
    if dynamics == "calibrated":
        return CalibratedBackend(scenario, params)
    raise ValueError(f"unknown dynamics {dynamics!r}: use 'calibrated', or pass a backend instance (e.g. an LLM backend)")


def start_session(env: Any, rng: np.random.Generator, options: dict[str, Any]) -> Session:
    """A session of an env set up by :func:`configure_session_env`, on a seeded draw of
    dialogue and cut row (``options`` may fix either: ``{"dialogue": sample_id, "start_row": k}``)."""
    dialogues = env.dialogues
    if "dialogue" in options:
        matches = [d for d in dialogues if d.sample_id == options["dialogue"]]
        if not matches:
            raise ValueError(f"no seed dialogue {options['dialogue']!r}; have {[d.sample_id for d in dialogues]}")
        dialogue = matches[0]
    else:
        dialogue = dialogues[int(rng.integers(len(dialogues)))]
    n_rows = len(dialogue.rows)
    if "start_row" in options:
        start = int(options["start_row"])
    else:
        low = min(env.min_prefix, n_rows - 1)
        start = int(rng.integers(low, n_rows)) if n_rows > 1 else 0
    return Session(
        dialogue, start, env.backend, env.encoding, rng, record=env.record_transcript, text_bank=env.text_bank, prefix_cache=env.prefix_cache
    )


def configure_session_env(
    env: Any,
    scenario: str,
    *,
    dynamics: str | ClientBackend = "calibrated",
    params: DynamicsParams | str | None = None,
    data_path: str | Sequence[Dialogue] | None = None,
    horizon: int = 30,
    reward: RewardConfig | dict[str, float] | None = None,
    max_members: int | None = None,
    min_prefix: int = 2,
    settle_threshold: float = 0.2,
    settle_steps: int = 3,
    terminate_on_settle: bool = True,
    record_transcript: bool = False,
    render_mode: str | None = None,
) -> None:
    """Validate the environment arguments shared by the Gymnasium and PettingZoo adapters
    and set them on ``env`` (encoding, backend, seed dialogues, reward, episode end, observer).
    See :class:`~rescue_env.envs.gym_env.GroupSupportEnv` for their meaning."""
    if scenario not in ("couple", "family"):
        raise ValueError(f"unknown scenario {scenario!r}: expected 'couple' or 'family'")
    if horizon < 1:
        raise ValueError(f"horizon must be at least 1, got {horizon}")
    modes = env.metadata["render_modes"]
    if render_mode is not None and render_mode not in modes:
        raise ValueError(f"render_mode {render_mode!r} not supported; use one of {modes}")
    env.scenario = scenario
    env.encoding = ActionEncoding(scenario, max_members)
    env.backend = make_backend(dynamics, scenario, params)
    env.dialogues, env.text_bank = seed_dialogues(data_path, scenario)
    env.horizon = int(horizon)
    env.reward_cfg = reward if isinstance(reward, RewardConfig) else RewardConfig(**(reward or {}))
    env.min_prefix = int(min_prefix)
    env.settle_threshold = float(settle_threshold)
    env.settle_steps = int(settle_steps)
    env.terminate_on_settle = bool(terminate_on_settle)
    env.record_transcript = bool(record_transcript) or render_mode == "ansi"
    env.render_mode = render_mode
    env.observer = Observer(env.encoding, scenario_patterns(scenario), env.horizon)
    env.prefix_cache = {}  # seed-row states per (dialogue, cut): resets copy instead of replaying


class Observer:
    """Builds the padded ``Dict`` observation of a session (see the Gym env's docstring)."""

    def __init__(self, encoding: ActionEncoding, patterns: Sequence[str], horizon: int):
        self.cap = encoding.max_members
        self.patterns = tuple(patterns)
        self._index = {p: i for i, p in enumerate(self.patterns)}
        self.horizon = horizon
        cap = self.cap
        self.space = spaces.Dict(
            {
                "distress": spaces.Box(0.0, 1.0, (cap,), np.float32),
                "stance": spaces.Box(-1.0, 1.0, (cap, cap), np.float32),
                "pattern": spaces.Box(0.0, 1.0, (len(self.patterns) + 1,), np.float32),
                "present": spaces.Box(0.0, 1.0, (cap,), np.float32),
                "untended": spaces.Box(0.0, 1.0, (cap,), np.float32),
                "tempo": spaces.Box(0.0, 1.0, (2,), np.float32),
            }
        )
        # The flat layout is gymnasium's ``spaces.flatten`` of the Dict (keys in sorted order),
        # so a policy trained on the vectorised env's flat vectors acts on ``flatten(space, obs)``.
        self.flat_space = spaces.flatten_space(self.space)
        assert list(self.space.spaces) == ["distress", "pattern", "present", "stance", "tempo", "untended"]
        self._slices: dict[str, tuple[slice, tuple[int, ...]]] = {}
        start = 0
        for key, box in self.space.spaces.items():
            size = int(np.prod(box.shape))
            self._slices[key] = (slice(start, start + size), box.shape)
            start += size
        # precomputed pieces of the flat list: cheaper to concatenate than to build (hot path)
        self._one_hot = np.eye(len(self.patterns) + 1).tolist()
        self._present = {k: [1.0] * k + [0.0] * (cap - k) for k in range(1, cap + 1)}
        self._zeros = [[0.0] * k for k in range(cap * cap + 1)]

    def observe(self, session: Session) -> dict[str, np.ndarray]:
        return self.observe_state(session.state, session.t, session.streak)

    def flat_values(self, st: GroupState, t: int = 0, streak: int = 0) -> list[float]:
        """The observation as a flat list in :attr:`flat_space` order (what the vectorised
        env writes into its buffer; the ``Dict`` observation is built from it)."""
        n, cap = st.n, self.cap
        pad = self._zeros[cap - n]
        k = self._index.get(st.pattern, len(self.patterns)) if st.pattern else len(self.patterns)
        if n == cap:  # a full group (every couple) needs no padding
            stance = st.stance.ravel().tolist()
        else:
            stance = []
            for row in st.stance.tolist():
                stance += row
                stance += pad
            stance += self._zeros[(cap - n) * cap]
        tempo = [t / self.horizon if t < self.horizon else 1.0, streak / 3.0 if streak < 3 else 1.0]
        untended = [0.1 * u if u < 10 else 1.0 for u in st.untended.tolist()]
        return st.distress.tolist() + pad + self._one_hot[k] + self._present[n] + stance + tempo + untended + pad

    def flatten(self, observation: dict[str, np.ndarray]) -> np.ndarray:
        """A ``Dict`` observation as the flat vector a flat-observation policy takes
        (gymnasium's ``spaces.flatten``; :meth:`flat_values` builds the same layout)."""
        return spaces.flatten(self.space, observation)

    def observe_state(self, st: GroupState, t: int = 0, streak: int = 0) -> dict[str, np.ndarray]:
        """The observation of a bare state (e.g. one extracted from a real dialogue)."""
        flat = np.array(self.flat_values(st, t, streak), np.float32)
        return {key: flat[sl].reshape(shape) for key, (sl, shape) in self._slices.items()}


class EpisodeBook:
    """σ* bookkeeping of one episode: discounted return, component sums, peaks, untended
    turns, settling."""

    def __init__(self, session: Session, reward: RewardConfig, settle_threshold: float, settle_steps: int):
        self.session = session
        self.reward = reward
        self.settle_threshold = settle_threshold
        self.settle_steps = settle_steps
        self.sigma_return = 0.0
        self._discount = 1.0
        self.components = {"mean_distress": 0.0, "stance": 0.0, "max_distress": 0.0, "intervention_cost": 0.0}
        self.peak_max = session.state.max_distress()
        self.untended_turns = [0] * session.n
        self.invalid = 0
        self._settled = 0

    def record(self, move: TherapistMove, invalid: bool) -> tuple[float, dict[str, float]]:
        """Book one step (after the session moved); returns the step reward and components."""
        st: GroupState = self.session.state
        reward, components = sigma_star(st, move.intervene, self.reward)
        self.sigma_return += self._discount * reward
        self._discount *= self.reward.gamma
        for k, v in components.items():
            self.components[k] += v
        worst = -components["max_distress"] / self.reward.lam if self.reward.lam else st.max_distress()
        self.peak_max = max(self.peak_max, worst)
        self.invalid += invalid
        turns = self.untended_turns
        for i in range(len(turns)):
            turns[i] += 1
        if move.intervene:
            for i in move.slots:
                turns[i] -= 1
        self._settled = self._settled + 1 if worst < self.settle_threshold else 0
        return reward, components

    @property
    def settled(self) -> bool:
        return self._settled >= self.settle_steps

    def stats(self) -> dict[str, Any]:
        st = self.session.state
        return {
            "steps": self.session.t,
            "sigma_return": self.sigma_return,
            "sigma": dict(self.components),
            "final_max_distress": st.max_distress(),
            "final_mean_distress": st.mean_distress(),
            "peak_max_distress": self.peak_max,
            "untended_turns": {m: int(x) for m, x in zip(self.session.members, self.untended_turns)},
            "interventions": self.session.n_interventions,
            "invalid_actions": self.invalid,
            "seed_dialogue": self.session.dialogue.sample_id,
            "start_row": self.session.start_row,
        }
