"""PettingZoo environment: the therapist and every client are agents of one session.

Factories (from the package root): :func:`parallel_env` (the ``ParallelEnv``),
:func:`raw_env` (AEC via PettingZoo's standard conversion) and :func:`env` (the AEC env with
the usual order-enforcing and bounds wrappers). Each takes ``scenario="couple"|"family"`` and
the keyword arguments of :class:`~rescue_env.envs.gym_env.GroupSupportEnv`.

Agents: ``"therapist"`` and ``"client_0"`` … ``"client_{N-1}"`` (member slots; the names of
the people are in ``infos[agent]["name"]``). A family smaller than the cap has fewer live
client agents.

- Therapist: action and observation as in the Gymnasium env; observation
  ``{"observation": Dict, "action_mask": int8}``.
- Client i: ``Discrete(1 + U·(N+2))``: 0 = stay silent; ``1 + u·(N+2) + a`` = an utterance of
  type ``u`` (:data:`~rescue_env.taxonomy.UTTERANCE_TYPES`) addressed to member slot ``a``
  (``a < N``), the therapist (``a = N``) or the whole group (``a = N+1``). Addressing
  oneself or an absent member is masked out. Observation: the shared view plus ``self``
  (one-hot slot) and ``action_mask``.
- Moves are simultaneous: clients choose without seeing the therapist's current move. A
  client agent missing from the action dict is played by the backend's own client policy,
  so any subset of client slots can be user-driven. Invalid (masked) client actions are
  played as silence.
- Rewards: the therapist gets σ*; client i gets ``−d_i + β · mean_j g_ij`` (its own distress
  and warmth toward the others).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv
from pettingzoo.utils import wrappers
from pettingzoo.utils.conversions import parallel_to_aec

from rescue_env.dynamics.base import TO_GROUP, TO_THERAPIST, Behaviour
from rescue_env.envs.common import check_action
from rescue_env.envs.gym_env import GroupSupportEnv, ResetNeeded
from rescue_env.session import Session
from rescue_env.taxonomy.labels import UTTERANCE_TYPES

THERAPIST_AGENT = "therapist"


class GroupSupportParallelEnv(ParallelEnv):
    """Multi-agent view of a simulated session (see the module docstring)."""

    metadata = {"name": "rescue_group_support_v0", "render_modes": ["ansi", "rgb_array"], "render_fps": 2, "is_parallelizable": True}

    def __init__(self, scenario: str | None = None, **kwargs: Any):
        """``scenario`` and the keyword arguments of
        :class:`~rescue_env.envs.gym_env.GroupSupportEnv` (``config=`` or the
        :class:`~rescue_env.config.EnvConfig` settings, ``dynamics``, ``params``,
        ``data_path``, ``reward``)."""
        # the therapist's env, N = 1: the core, the session view, σ*, masks are its own
        self.single = GroupSupportEnv(scenario, **kwargs)
        self.render_mode = self.single.render_mode
        observer = self.single.observer
        self.encoding = self.single.encoding
        cap = self.encoding.max_members
        self.n_utterances = len(UTTERANCE_TYPES)
        self.n_addressees = cap + 2
        self.possible_agents = [THERAPIST_AGENT] + [f"client_{i}" for i in range(cap)]
        n_client_actions = 1 + self.n_utterances * self.n_addressees
        self._observation_spaces = {
            THERAPIST_AGENT: spaces.Dict(
                {"observation": observer.space, "action_mask": spaces.Box(0, 1, (self.encoding.n_actions,), np.int8)}
            )
        }
        self._action_spaces: dict[str, spaces.Space] = {THERAPIST_AGENT: spaces.Discrete(self.encoding.n_actions)}
        for i in range(cap):
            agent = f"client_{i}"
            self._observation_spaces[agent] = spaces.Dict(
                {
                    "observation": spaces.Dict({**observer.space.spaces, "self": spaces.Box(0.0, 1.0, (cap,), np.float32)}),
                    "action_mask": spaces.Box(0, 1, (n_client_actions,), np.int8),
                }
            )
            self._action_spaces[agent] = spaces.Discrete(n_client_actions)
        #: the global state's space (the therapist's observation, flattened)
        self.state_space = observer.flat_space
        self.agents: list[str] = []

    @property
    def session(self) -> Session | None:
        """The current episode's view (members, state, transcript)."""
        return self.single.session

    scenario = property(lambda self: self.single.scenario)
    backend = property(lambda self: self.single.backend)
    observer = property(lambda self: self.single.observer)
    reward_cfg = property(lambda self: self.single.reward_cfg)
    horizon = property(lambda self: self.single.horizon)
    record_transcript = property(lambda self: self.single.record_transcript)
    config = property(lambda self: self.single.config)
    dialogues = property(lambda self: self.single.dialogues)
    params = property(lambda self: self.single.params)

    # spaces (same object every call) -----------------------------------------------------
    def observation_space(self, agent: str) -> spaces.Space:
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self._action_spaces[agent]

    # client action encoding ------------------------------------------------------------------
    def client_action(self, utterance_type: str | int, addressee: int) -> int:
        """Flat client action for an utterance type toward ``addressee`` (a member slot,
        :data:`TO_THERAPIST` or :data:`TO_GROUP`)."""
        u = UTTERANCE_TYPES.index(utterance_type) if isinstance(utterance_type, str) else int(utterance_type)
        cap = self.encoding.max_members
        a = cap if addressee == TO_THERAPIST else cap + 1 if addressee == TO_GROUP else int(addressee)
        return 1 + u * self.n_addressees + a

    def decode_client_action(self, action: int) -> Behaviour | None:
        """``None`` for silence, else the :class:`Behaviour`."""
        if action == 0:
            return None
        u, a = divmod(int(action) - 1, self.n_addressees)
        cap = self.encoding.max_members
        addressee = TO_THERAPIST if a == cap else TO_GROUP if a == cap + 1 else a
        return Behaviour(u, addressee)

    def _client_mask(self, slot: int, n: int) -> np.ndarray:
        cap = self.encoding.max_members
        per_type = np.zeros(self.n_addressees, np.int8)
        per_type[:n] = 1
        per_type[slot] = 0
        per_type[cap] = 1
        per_type[cap + 1] = int(n > 1)
        return np.concatenate([np.ones(1, np.int8), np.tile(per_type, self.n_utterances)])

    # observations -------------------------------------------------------------------------------
    def _observations(self, shared: dict[str, np.ndarray]) -> dict[str, Any]:
        session = self.single.session
        obs: dict[str, Any] = {THERAPIST_AGENT: {"observation": shared, "action_mask": self._therapist_mask.copy()}}
        cap = self.encoding.max_members
        for i in range(session.n):
            me = np.zeros(cap, np.float32)
            me[i] = 1.0
            obs[f"client_{i}"] = {"observation": {**shared, "self": me}, "action_mask": self._client_masks[i].copy()}
        return obs

    def _client_infos(self, infos: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for i, name in enumerate(self.single.session.members):
            infos[f"client_{i}"] = {"name": name}
        return infos

    # API ----------------------------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        shared, info = self.single.reset(seed=seed, options=options)
        n = self.single.session.n
        self._therapist_mask = info["action_mask"]
        self._client_masks = [self._client_mask(i, n) for i in range(n)]
        self.agents = [THERAPIST_AGENT] + [f"client_{i}" for i in range(n)]
        return self._observations(shared), self._client_infos({THERAPIST_AGENT: {"state": info["state"]}})

    def step(self, actions: dict[str, int]):
        if self.single.session is None or not self.agents:
            raise ResetNeeded("call reset() before step() (the episode may have ended)")
        if THERAPIST_AGENT not in actions:
            raise ValueError(f"actions must include {THERAPIST_AGENT!r}; got {sorted(actions)}")
        unknown = set(actions) - set(self.agents)
        if unknown:
            raise ValueError(f"actions for agents not in the episode: {sorted(unknown)}; live agents are {self.agents}")
        single = self.single
        session = single.session
        n = session.n
        behaviours: dict[int, Behaviour | None] = {}
        for i in range(n):
            agent = f"client_{i}"
            if agent in actions:
                a = check_action(actions[agent], len(self._client_masks[i]), self._action_spaces[agent])
                # a masked client action (oneself, an absent member) is played as silence
                behaviours[i] = self.decode_client_action(a) if self._client_masks[i][a] else None
        # slots absent from `behaviours` are played by the client model
        shared, reward, terminated, truncated, info = single.play(actions[THERAPIST_AGENT], behaviours)
        st = session.state
        rewards = {THERAPIST_AGENT: float(reward)}
        beta = single.reward_cfg.beta
        for i in range(n):
            warmth = float(st.stance[i].sum() / (n - 1)) if n > 1 else 0.0
            rewards[f"client_{i}"] = float(-st.distress[i] + beta * warmth)
        observations = self._observations(shared)
        infos = self._client_infos({THERAPIST_AGENT: info})
        terminations = {a: terminated for a in self.agents}
        truncations = {a: truncated for a in self.agents}
        if terminated or truncated:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def say(self, text: str) -> None:
        """The therapist's words for the next step's therapist row (see ``GroupSupportEnv.say``)."""
        self.single.say(text)

    def render(self):
        if self.render_mode is None or self.single.session is None:
            return None
        return self.single.render()

    def close(self) -> None:
        """Release what the env holds (an LLM client model's connections included)."""
        self.single.close()
        self.agents = []

    def state(self) -> np.ndarray:
        """Global state vector (the therapist's observation, flattened; see ``state_space``)."""
        if self.single.session is None:
            raise ResetNeeded("call reset() before state()")
        return self.single.core.obs[0].copy()

def parallel_env(scenario: str = "couple", **kwargs: Any) -> GroupSupportParallelEnv:
    """The ``ParallelEnv`` (see the module docstring for agents, spaces and rewards)."""
    return GroupSupportParallelEnv(scenario, **kwargs)


def raw_env(scenario: str = "couple", **kwargs: Any):
    """The AEC env, converted from the parallel one by PettingZoo's ``parallel_to_aec``."""
    return parallel_to_aec(parallel_env(scenario, **kwargs))


def env(scenario: str = "couple", **kwargs: Any):
    """The AEC env with PettingZoo's standard wrappers (bounds check, order enforcing)."""
    aec = raw_env(scenario, **kwargs)
    aec = wrappers.AssertOutOfBoundsWrapper(aec)
    return wrappers.OrderEnforcingWrapper(aec)
