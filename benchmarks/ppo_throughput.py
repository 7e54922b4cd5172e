"""PPO training throughput (env steps per second) on Couple-v0 against CartPole-v1.

Run: ``python benchmarks/ppo_throughput.py [--timesteps N] [--rounds R]``. All routes are
trained in this process, in this run, interleaved round by round, with the same policy
network (``MlpPolicy``, two hidden layers of 64), the same number of vectorised envs,
``n_steps`` and batch size:

* ``CartPole-v1``: the reference, SB3's usual route (``make_vec_env``: ``DummyVecEnv`` over
  ``Monitor``-wrapped envs);
* ``Couple-v0 (GroupSupportVecEnv)``: what ``rescue train`` uses, the native ``VecEnv`` with
  flat observations (:mod:`rescue_env.envs.vec_env`) — the figure the target is about;
* ``Couple-v0 (DummyVecEnv, Dict obs)``: the generic route a user gets from
  ``make_vec_env("rescue_env/Couple-v0")`` with ``MultiInputPolicy``, for comparison.

Each figure is the median over rounds; the ratio is against CartPole's median measured in
the same run. Target ratio ≥ 0.85 for the native route.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

import rescue_env  # noqa: F401  (registers the env ids)
from rescue_env.envs.vec_env import GroupSupportVecEnv


def steps_per_second(make: str, timesteps: int, n_envs: int, n_steps: int, seed: int) -> float:
    vec: VecEnv
    if make == "cartpole":
        vec, policy = make_vec_env("CartPole-v1", n_envs=n_envs, seed=seed, vec_env_cls=DummyVecEnv), "MlpPolicy"
    elif make == "native":
        vec, policy = GroupSupportVecEnv("couple", num_envs=n_envs, seed=seed), "MlpPolicy"
    else:
        vec, policy = make_vec_env("rescue_env/Couple-v0", n_envs=n_envs, seed=seed, vec_env_cls=DummyVecEnv), "MultiInputPolicy"
    model = PPO(policy, vec, n_steps=n_steps, batch_size=n_steps * n_envs // 4, policy_kwargs={"net_arch": [64, 64]}, seed=seed, device="cpu", verbose=0)
    model.learn(n_steps * n_envs)  # warm-up: first rollout and update (allocations, lazy imports)
    t0 = time.perf_counter()
    model.learn(timesteps, reset_num_timesteps=False)
    elapsed = time.perf_counter() - t0
    vec.close()
    return timesteps / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timesteps", type=int, default=16384)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n-envs", type=int, default=8)
    parser.add_argument("--n-steps", type=int, default=256)
    args = parser.parse_args()
    torch.set_num_threads(1)
    runs = {
        "CartPole-v1": "cartpole",
        "Couple-v0 (GroupSupportVecEnv)": "native",
        "Couple-v0 (DummyVecEnv, Dict obs)": "dummy",
    }
    sps: dict[str, list[float]] = {k: [] for k in runs}
    for r in range(args.rounds):
        for name, make in runs.items():
            sps[name].append(steps_per_second(make, args.timesteps, args.n_envs, args.n_steps, seed=r))
    ref = statistics.median(sps["CartPole-v1"])
    print(f"PPO, {args.n_envs} envs × n_steps {args.n_steps}, net [64, 64], {args.timesteps} steps × {args.rounds} rounds")
    print(f"{'route':<36}{'steps/s':>10}{'ratio':>8}")
    for name, values in sps.items():
        med = statistics.median(values)
        print(f"{name:<36}{med:>10.0f}{med / ref:>8.2f}")


if __name__ == "__main__":
    main()
