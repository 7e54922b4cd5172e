"""A native stable-baselines3 ``VecEnv`` of N therapist environments, for RL training.

``GroupSupportVecEnv`` steps N :class:`~rescue_env.envs.gym_env.GroupSupportEnv` sessions in
one call and writes their observations straight into one ``(N, D)`` float32 buffer, in the
flat layout of gymnasium's ``spaces.flatten`` of the env's ``Dict`` observation (so SB3's
``MlpPolicy`` takes it as it takes CartPole's). It exists for speed: ``DummyVecEnv`` over the
Gymnasium env builds a ``Dict`` observation and an info dict per env per step and then
deep-copies every info, which on this simulator cost about as much as the policy's forward
pass (``benchmarks/ppo_throughput.py`` measures both routes).

Same episodes as ``DummyVecEnv``: env ``i`` is reset with ``seed + i`` and auto-resets the
way SB3's vectorised envs do, so rewards and dones are equal and each observation is the
flattened ``Dict`` observation of the same env (a test holds the two routes equal).

Infos are empty dicts except when an episode ends: then ``terminal_observation``,
``TimeLimit.truncated``, ``episode`` (``r``, ``l``, ``t``: what SB3's ``Monitor`` writes and
its logger reads for ``rollout/ep_rew_mean``), ``sigma_return`` and ``episode_stats``.
MaskablePPO finds the masks through ``env_method("action_masks")``; :meth:`action_masks`
returns them as one ``(N, A)`` array.

The first step after a fresh install compiles the kernel (about 3 s); numba caches it on
disk, so later processes start at once.

Example::

    from sb3_contrib import MaskablePPO
    from rescue_env.envs import GroupSupportVecEnv

    venv = GroupSupportVecEnv("couple", num_envs=8, seed=0)
    model = MaskablePPO("MlpPolicy", venv).learn(50_000)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn

from rescue_env.dynamics.batched import (
    F_COST,
    F_DISCOUNT,
    F_MAX,
    F_MEAN,
    F_PEAK,
    F_RETURN,
    F_STANCE,
    I_INTERVENTIONS,
    I_INVALID,
    I_LAST_SPEAKER,
    I_LAST_STRATEGY,
    I_LAST_TARGET,
    I_PATTERN,
    I_ROW,
    I_SETTLED,
    I_STREAK,
    I_T,
    KEEP,
    BatchedCalibrated,
)
from rescue_env.dynamics.calibrated import CalibratedBackend
from rescue_env.envs.gym_env import GroupSupportEnv


#: env settings the batched kernel bakes in; sessions must agree on them to share it
_KERNEL_SETTINGS = ("horizon", "reward_cfg", "settle_threshold", "settle_steps", "terminate_on_settle")
#: attributes whose change rebuilds the kernel
_KERNEL_ATTRS = frozenset({*_KERNEL_SETTINGS, "backend", "encoding"})
#: methods that read nothing the kernel moves (masks are fixed for an episode)
_MASK_METHODS = frozenset({"action_masks", "action_mask_factored"})


def _same_params(a: Any, b: Any) -> bool:
    if a is b:
        return True
    va, vb = vars(a), vars(b)
    return va.keys() == vb.keys() and all(
        np.array_equal(x, vb[k]) if isinstance(x, np.ndarray) else x == vb[k] for k, x in va.items()
    )


class GroupSupportVecEnv(VecEnv):
    """N therapist environments stepped together, flat observations.

    Args:
        scenario: ``"couple"`` or ``"family"``.
        num_envs: number of parallel sessions.
        seed: seeds the first reset (env ``i`` gets ``seed + i``), like ``make_vec_env``;
            ``None`` leaves seeding to :meth:`seed` or to fresh entropy.
        batched: step the calibrated model for all sessions in one compiled call
            (:mod:`rescue_env.dynamics.batched`; the default). Other backends (LLM
            personas), or ``batched=False``, step each env's Python reference in turn; both
            give the same episodes.
        **env_kwargs: the arguments of :class:`GroupSupportEnv` (``data_path``, ``horizon``,
            ``reward``, ``dynamics``, ``params``…), the same for every env.

    ``get_attr``, ``set_attr`` and ``env_method`` see (and may change) the live sessions:
    the batched state is written back to each env first, and read again from it before the
    next step (so a change made through an object ``get_attr`` returned is kept too).
    ``reset_infos`` holds each env's reset info, as with ``DummyVecEnv``.
    """

    def __init__(self, scenario: str = "couple", num_envs: int = 8, *, seed: int | None = None, batched: bool = True, **env_kwargs: Any):
        if int(num_envs) < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        if env_kwargs.get("record_transcript") or env_kwargs.get("render_mode") == "ansi":
            # transcripts are for rollouts; the flat buffer path exists for training speed
            raise ValueError("GroupSupportVecEnv does not record transcripts: use GroupSupportEnv (or DummyVecEnv over it) for that")
        self.envs = [GroupSupportEnv(scenario, **env_kwargs) for _ in range(int(num_envs))]
        first = self.envs[0]
        self._kernel: BatchedCalibrated | None = None
        self._started = False
        super().__init__(len(self.envs), first.observer.flat_space, first.action_space)
        self.scenario = scenario
        self.batched = bool(batched)
        self._obs = np.zeros((self.num_envs, *self.observation_space.shape), dtype=np.float32)
        self._rewards = np.zeros(self.num_envs, dtype=np.float32)
        self._dones = np.zeros(self.num_envs, dtype=bool)
        self._ep_return = np.zeros(self.num_envs)
        self._ep_length = np.zeros(self.num_envs, dtype=np.int64)
        self._actions = np.zeros(self.num_envs, dtype=np.int64)
        self._t_start = time.time()
        self._draws: list[tuple[np.random.Generator, np.ndarray, np.ndarray] | None] = [None] * self.num_envs
        self._stale: set[int] = set()  # envs to read back before the next step
        self._build_kernel()
        if seed is not None:
            self.seed(seed)

    # SB3 VecEnv API --------------------------------------------------------------------
    def reset(self) -> VecEnvObs:
        for i, env in enumerate(self.envs):
            _, self.reset_infos[i] = env.reset(seed=self._seeds[i], options=self._options[i] or None)
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        self._reset_seeds()
        self._reset_options()
        self._started = True
        self._stale.clear()
        self._load_all()
        return self._obs.copy()

    def step_async(self, actions: np.ndarray) -> None:
        if not self._started:
            raise RuntimeError("call reset() before step()")
        acts = np.asarray(actions)
        if acts.shape not in ((self.num_envs,), (self.num_envs, 1)) or acts.dtype.kind not in "iu":
            raise ValueError(f"expected {self.num_envs} integer actions in {self.action_space}, got an array of shape {acts.shape} and dtype {acts.dtype}")
        acts = acts.reshape(self.num_envs)
        if acts.min() < 0 or acts.max() >= self.action_space.n:  # type: ignore[attr-defined]
            raise ValueError(f"actions {acts.tolist()} outside {self.action_space}")
        self._actions[:] = acts

    def step_wait(self) -> VecEnvStepReturn:
        kernel = self._kernel
        if kernel is None:
            return self._step_reference()
        if self._stale:
            for i in sorted(self._stale):
                self._load(i)
            self._stale.clear()
        for rng, uniforms, normals in self._draws:  # type: ignore[misc]  # each session's stream, reference order
            rng.random(out=uniforms)
            rng.standard_normal(out=normals)
        kernel.step(self._actions)  # writes the observations into self._obs
        rewards = kernel.rewards
        dones = kernel.terminated | kernel.truncated
        self._ep_return += rewards
        self._ep_length += 1
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        if dones.any():
            for i in np.flatnonzero(dones).tolist():
                self._sync(i)
                infos[i] = self._final_info(i, self.envs[i], bool(kernel.terminated[i]), bool(kernel.truncated[i]), self._obs[i].copy())
                self._restart(i)
                self._load(i)
        return self._obs.copy(), rewards.astype(np.float32), dones, infos

    def _step_reference(self) -> VecEnvStepReturn:
        infos: list[dict[str, Any]] = []
        for i, (env, action) in enumerate(zip(self.envs, self._actions.tolist())):
            reward, _, terminated, truncated = env._advance(action)
            self._rewards[i] = reward
            self._ep_return[i] += reward
            self._ep_length[i] += 1
            done = terminated or truncated
            self._dones[i] = done
            if done:
                infos.append(self._final_info(i, env, terminated, truncated, self._flat(env)))
                self._restart(i)
            else:
                infos.append({})
            self._obs[i] = self._flat(env)
        return self._obs.copy(), self._rewards.copy(), self._dones.copy(), infos

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        idx = list(self._get_indices(indices))
        for i in idx:
            self._sync(i)
        self._mark_stale(idx)  # the caller may change what it gets (e.g. the live state)
        return [getattr(self.envs[i], attr_name) for i in idx]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        idx = list(self._get_indices(indices))
        for i in range(self.num_envs):  # all of them: a kernel rebuild reloads every env
            self._sync(i)
        for i in idx:
            setattr(self.envs[i], attr_name, value)
        if attr_name in _KERNEL_ATTRS:
            self._build_kernel()
        else:
            self._mark_stale(idx)

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any) -> list[Any]:
        idx = list(self._get_indices(indices))
        if method_name in _MASK_METHODS:  # MaskablePPO asks every step: no round trip
            return [getattr(self.envs[i], method_name)(*method_args, **method_kwargs) for i in idx]
        out = []
        for i in idx:
            self._sync(i)
            session = self.envs[i].session
            out.append(getattr(self.envs[i], method_name)(*method_args, **method_kwargs))
            if self.envs[i].session is not session:  # the method started a new episode
                self._ep_return[i], self._ep_length[i] = 0.0, 0
        self._mark_stale(idx)
        return out

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        # the sessions are bare envs: nothing wraps them (episode statistics come from here)
        return [False for _ in self._get_indices(indices)]

    def get_images(self) -> Sequence[np.ndarray | None]:
        if self.render_mode != "rgb_array":
            return [None for _ in self.envs]
        return [self.get_attr("render", i)[0]() for i in range(self.num_envs)]

    # extras ------------------------------------------------------------------------------
    def action_masks(self) -> np.ndarray:
        """``(num_envs, n_actions)`` boolean masks of the current groups."""
        return np.stack([env.action_masks() for env in self.envs])

    # batched state <-> the envs' sessions ----------------------------------------------------
    def _build_kernel(self) -> None:
        """(Re)build the batched kernel when every env runs the calibrated model with the
        same settings; otherwise step the reference envs one by one."""
        first = self.envs[0]
        backends = [env.backend for env in self.envs]
        if not (
            self.batched
            # exactly the calibrated model: a subclass may step differently from the kernel
            and all(type(b) is CalibratedBackend and _same_params(b.params, backends[0].params) for b in backends)  # type: ignore[attr-defined]
            and all(getattr(env, k) == getattr(first, k) for env in self.envs for k in _KERNEL_SETTINGS)
            and all(env.encoding.max_members == first.encoding.max_members for env in self.envs)
        ):
            self._kernel = None
            return
        self._kernel = BatchedCalibrated(
            first.backend,
            first.encoding,
            first.reward_cfg,
            num_sessions=self.num_envs,
            horizon=first.horizon,
            settle_threshold=first.settle_threshold,
            settle_steps=first.settle_steps,
            terminate_on_settle=first.terminate_on_settle,
            obs=self._obs,
        )
        self._stale.clear()
        if self._started:
            self._load_all()

    def _load_all(self) -> None:
        for i in range(self.num_envs):
            self._load(i)

    def _mark_stale(self, indices: list[int]) -> None:
        if self._started and self._kernel is not None:
            self._stale.update(indices)

    def _load(self, i: int) -> None:
        """Copy env ``i``'s live session into the batched arrays and its observation row."""
        env = self.envs[i]
        session = env.session
        if session is None:  # never reset: nothing to read yet
            return
        self._obs[i] = self._flat(env)
        k = self._kernel
        if k is None:
            return
        k.ensure_streak(session.t)  # streaks never exceed the steps played
        st, book, n = session.state, env.book, session.n
        k.D[i] = 0.0
        k.D[i, :n] = st.distress
        k.G[i] = 0.0
        k.G[i, :n, :n] = st.stance
        k.I[i] = (n, k.backend.pattern_index(st.pattern), session.t, session.streak, session.n_interventions, session._row_index, book.invalid, book._settled, KEEP, KEEP, KEEP)
        c = book.components
        k.F[i] = (book.sigma_return, book._discount, c["mean_distress"], c["stance"], c["max_distress"], c["intervention_cost"], book.peak_max)
        k.UNT[i] = 0
        k.UNT[i, :n] = st.untended
        k.TURNS[i] = 0
        k.TURNS[i, :n] = book.untended_turns
        self._draws[i] = (session.rng, k.U[i, : 6 + n], k.NOISE[i, : n + n * n])

    def _sync(self, i: int) -> None:
        """Write the batched state of session ``i`` back to its env (session, state, book)."""
        k = self._kernel
        if k is None or not self._started:
            return
        env = self.envs[i]
        session = env.session
        assert session is not None
        st, book, n = session.state, env.book, session.n
        I, F = k.I[i], k.F[i]
        st.distress = k.D[i, :n].copy()
        st.stance = k.G[i, :n, :n].copy()
        patterns = k.backend.params.patterns
        st.pattern = patterns[I[I_PATTERN]] if I[I_PATTERN] < len(patterns) else None
        st.untended = k.UNT[i, :n].copy()
        session.t, session.streak, session.n_interventions = int(I[I_T]), int(I[I_STREAK]), int(I[I_INTERVENTIONS])
        if session.t:
            session._row_index = st.row_index = int(I[I_ROW])
        if I[I_LAST_SPEAKER] != KEEP:
            st.last_speaker = session.members[I[I_LAST_SPEAKER]]
        if I[I_LAST_STRATEGY] != KEEP:
            st.last_strategy = session.encoding.strategy_names[I[I_LAST_STRATEGY]]
            st.last_target = tuple(session.members[j] for j in session.encoding.target_slots(int(I[I_LAST_TARGET]), n))
        book.sigma_return, book._discount, book.peak_max = float(F[F_RETURN]), float(F[F_DISCOUNT]), float(F[F_PEAK])
        book.components = {"mean_distress": float(F[F_MEAN]), "stance": float(F[F_STANCE]), "max_distress": float(F[F_MAX]), "intervention_cost": float(F[F_COST])}
        book.invalid, book._settled = int(I[I_INVALID]), int(I[I_SETTLED])
        book.untended_turns = k.TURNS[i, :n].tolist()

    def _restart(self, i: int) -> None:
        """Auto-reset env ``i`` after its episode ended, as SB3's vectorised envs do."""
        env = self.envs[i]
        env._begin(None, None)
        self.reset_infos[i] = env._reset_info()
        self._ep_return[i], self._ep_length[i] = 0.0, 0

    def _flat(self, env: GroupSupportEnv) -> list[float]:
        session = env.session
        assert session is not None
        return env.observer.flat_values(session.state, session.t, session.streak)

    def _final_info(self, i: int, env: GroupSupportEnv, terminated: bool, truncated: bool, terminal: Any) -> dict[str, Any]:
        return {
            "terminal_observation": np.asarray(terminal, dtype=np.float32),
            "TimeLimit.truncated": truncated and not terminated,
            "episode": {"r": float(self._ep_return[i]), "l": int(self._ep_length[i]), "t": round(time.time() - self._t_start, 6)},
            "sigma_return": env.book.sigma_return,
            "episode_stats": env.book.stats(),
        }
