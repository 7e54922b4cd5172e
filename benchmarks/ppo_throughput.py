"""PPO training throughput (env steps per second) on Couple-v0 against CartPole-v1.

Run: ``python benchmarks/ppo_throughput.py [--timesteps N] [--rounds R]``. Both are trained
in this process, in this run, interleaved, with the same policy network (two hidden layers
of 64), the same number of vectorised envs (DummyVecEnv), ``n_steps`` and batch size; only
the observation front-end differs (``MultiInputPolicy`` flattens our Dict observation,
``MlpPolicy`` takes CartPole's Box). The figure is the median over rounds; target ratio ≥ 0.85.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv

import rescue_env  # noqa: F401  (registers the env ids)


def steps_per_second(env_id: str, policy: str, timesteps: int, n_envs: int, n_steps: int, seed: int) -> float:
    vec = make_vec_env(env_id, n_envs=n_envs, seed=seed, vec_env_cls=DummyVecEnv)
    model = PPO(policy, vec, n_steps=n_steps, batch_size=n_steps * n_envs // 4, policy_kwargs={"net_arch": [64, 64]}, seed=seed, device="cpu", verbose=0)
    model.learn(n_steps * n_envs)  # warm-up: first rollout and update (allocations, JIT paths)
    t0 = time.perf_counter()
    model.learn(timesteps, reset_num_timesteps=False)
    elapsed = time.perf_counter() - t0
    vec.close()
    return timesteps / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--timesteps", type=int, default=16384)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n-envs", type=int, default=8)
    parser.add_argument("--n-steps", type=int, default=256)
    args = parser.parse_args()
    torch.set_num_threads(1)
    runs = {"CartPole-v1": ("CartPole-v1", "MlpPolicy"), "rescue_env/Couple-v0": ("rescue_env/Couple-v0", "MultiInputPolicy")}
    sps: dict[str, list[float]] = {k: [] for k in runs}
    for r in range(args.rounds):
        for name, (env_id, policy) in runs.items():
            sps[name].append(steps_per_second(env_id, policy, args.timesteps, args.n_envs, args.n_steps, seed=r))
    ref = statistics.median(sps["CartPole-v1"])
    print(f"PPO, {args.n_envs} envs × n_steps {args.n_steps}, net [64, 64], {args.timesteps} steps × {args.rounds} rounds")
    print(f"{'env':<24}{'steps/s':>10}{'ratio':>8}")
    for name, values in sps.items():
        med = statistics.median(values)
        print(f"{name:<24}{med:>10.0f}{med / ref:>8.2f}")


if __name__ == "__main__":
    main()
