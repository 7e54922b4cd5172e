"""Time ``env.step`` of Couple-v0, Family-v0 and the PettingZoo env against CartPole-v1.

Run: ``python benchmarks/env_step.py [--steps N]``. All envs are timed in this process, in
this run, interleaved over several rounds (the machine is shared and noisy); the figure per
env is the median over rounds of µs/step, and the ratio is to CartPole's median. Actions
are drawn beforehand (masked-random for ours) so only ``step`` (and ``reset`` at episode
ends, as in training) is timed. Targets: couple ≤ 3× CartPole, family ≤ 4×.

The ``VecEnv`` rows time :class:`~rescue_env.envs.vec_env.GroupSupportVecEnv` (8 sessions,
the batched kernel ``rescue train`` uses) per session step, against CartPole-v1 under SB3's
``DummyVecEnv`` with 8 envs (the usual SB3 route), also per env step.
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import numpy as np

import rescue_env


def time_gym(env: gym.Env, steps: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    _, info = env.reset(seed=seed)
    mask = info.get("action_mask")
    if mask is not None:
        valid = np.flatnonzero(mask)
        actions = rng.choice(valid, size=steps)
    else:
        actions = rng.integers(env.action_space.n, size=steps)
    t0 = time.perf_counter()
    for a in actions:
        _, _, term, trunc, _ = env.step(int(a))
        if term or trunc:
            env.reset()
    return (time.perf_counter() - t0) / steps * 1e6


def time_parallel(env, steps: int, seed: int) -> float:
    env.reset(seed=seed)
    for agent in env.possible_agents:
        env.action_space(agent).seed(seed)
    t0 = time.perf_counter()
    for _ in range(steps):
        actions = {a: 0 for a in env.agents}  # listen / silent: timing the env, not sampling
        _, _, term, trunc, _ = env.step(actions)
        if not env.agents:
            env.reset()
    return (time.perf_counter() - t0) / steps * 1e6


def time_vec(venv, steps: int, seed: int) -> float:
    """µs per env step of an SB3 VecEnv stepped with masked-random actions."""
    venv.seed(seed)
    venv.reset()
    rng = np.random.default_rng(seed)
    n = venv.num_envs
    rounds = max(steps // n, 1)
    masks = np.stack(venv.env_method("action_masks")) if venv.has_attr("action_masks") else np.ones((n, venv.action_space.n), bool)
    actions = np.stack([np.array([rng.choice(np.flatnonzero(masks[i])) for i in range(n)]) for _ in range(rounds)])
    t0 = time.perf_counter()
    for a in actions:
        venv.step(a)
    return (time.perf_counter() - t0) / (rounds * n) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    envs = {
        "CartPole-v1": lambda: gym.make("CartPole-v1").unwrapped,
        "rescue_env/Couple-v0": lambda: gym.make("rescue_env/Couple-v0").unwrapped,
        "rescue_env/Family-v0": lambda: gym.make("rescue_env/Family-v0").unwrapped,
    }
    built = {k: f() for k, f in envs.items()}
    pz = {"parallel couple": rescue_env.parallel_env("couple"), "parallel family": rescue_env.parallel_env("family")}
    from stable_baselines3.common.env_util import make_vec_env

    from rescue_env.envs.vec_env import GroupSupportVecEnv

    vecs = {
        "VecEnv: CartPole-v1 (DummyVecEnv)": make_vec_env("CartPole-v1", n_envs=8),
        "VecEnv: Couple (GroupSupportVecEnv)": GroupSupportVecEnv("couple", num_envs=8),
        "VecEnv: Family (GroupSupportVecEnv)": GroupSupportVecEnv("family", num_envs=8),
    }
    times: dict[str, list[float]] = {k: [] for k in [*built, *pz, *vecs]}
    for r in range(args.rounds):
        for name, env in built.items():
            times[name].append(time_gym(env, args.steps, seed=r))
        for name, env in pz.items():
            times[name].append(time_parallel(env, args.steps, seed=r))
        for name, venv in vecs.items():
            times[name].append(time_vec(venv, args.steps, seed=r))
    ref = statistics.median(times["CartPole-v1"])
    vec_ref = statistics.median(times["VecEnv: CartPole-v1 (DummyVecEnv)"])
    print(f"{'env':<38}{'µs/step':>10}{'× CartPole':>12}")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:<38}{med:>10.1f}{med / (vec_ref if name.startswith('VecEnv') else ref):>12.2f}")


if __name__ == "__main__":
    main()
