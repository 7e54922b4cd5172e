"""Batched env-steps/s of Couple and Family against gymnasium's ``CartPoleVectorEnv``, by N.

Run: ``python benchmarks/vec_scale.py [--quick] [--sizes 8 64 256 1024] [--rounds 5] [--seconds 0.5]``.

What is timed, per batch size N: a loop of ``step`` calls with uniformly random *valid*
actions — the masks are read from the env every step (``action_masks()``, an ``(N, A)``
array) and an action is drawn uniformly among each row's valid ones — with the envs'
own auto-resets. The reference is ``gym.make_vec("CartPole-v1", num_envs=N,
vectorization_mode="vector_entry_point")`` (gymnasium's batched ``CartPoleVectorEnv``; all
actions valid, drawn with the same sampler) at the same N, in the same process and run.
Each round times every (env, N) once, for ``--seconds`` each, rounds interleaved (the
machine is shared and noisy); a figure is the median over rounds, and the ratio is ours over
CartPole's median at that N. The sampler's own cost per call is printed too (it is inside
every figure, and bounds what a faster env can show at large N), and a breakdown: µs per
call of the whole timed loop and of the simulator core's step alone (``env.core.step``, the
compiled kernel without the wrapper; valid actions drawn beforehand).

Also: the single env's ``step`` (``gym.make("rescue_env/Couple-v0")`` and ``Family-v0``,
wrappers as users get them, masked random actions from ``info["action_mask"]``, resets at
episode ends) against ``gym.make("CartPole-v1")``; and the memory per session at N = 1024
(``--mem-n``), measured in a fresh process: the resident-set growth and tracemalloc's count
of Python/NumPy allocations over building the batch, resetting it and stepping it 100 times,
divided by N.

The batched env under test comes from :func:`make_batched` — one small function:
``gym.make_vec("rescue_env/...", vectorization_mode="vector_entry_point")`` when the ids have
a vector entry point, else the SB3 ``GroupSupportVecEnv``.
The route used is printed.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing as mp
import os
import statistics
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

import rescue_env  # noqa: F401  (registers the env ids)
from rescue_env.core import NEXT_STEP

ENV_IDS = {"couple": "rescue_env/Couple-v0", "family": "rescue_env/Family-v0"}


@dataclass
class Batched:
    """A batch of N envs behind one interface: ``step(actions)``, ``masks()`` → (N, A) bool."""

    route: str
    num_envs: int
    n_actions: int
    step: Callable[[np.ndarray], Any]
    masks: Callable[[], np.ndarray]
    close: Callable[[], None]
    #: the simulator core's step alone (no wrapper), for the printed breakdown; None: CartPole
    kernel: Callable[[np.ndarray], Any] | None = None


def make_batched(scenario: str, num_envs: int, seed: int = 0) -> Batched:
    """The batched env of ``scenario`` with ``num_envs`` sessions, reset with ``seed``.

    ``gym.make_vec(..., vectorization_mode="vector_entry_point")`` when the id has a vector
    entry point (masks from its ``action_masks()``); otherwise the SB3 ``GroupSupportVecEnv``.
    """
    env_id = ENV_IDS[scenario]
    if gym.spec(env_id).vector_entry_point is not None:
        venv = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point")
        venv.reset(seed=seed)
        core = venv.unwrapped.core
        return Batched(
            f"gym.make_vec({env_id!r}, vectorization_mode='vector_entry_point') → {type(venv).__name__}",
            num_envs, int(venv.single_action_space.n), venv.step, venv.action_masks, venv.close,
            lambda actions: core.step(actions, NEXT_STEP),
        )
    from rescue_env.envs.vec_env import GroupSupportVecEnv

    venv = GroupSupportVecEnv(scenario, num_envs=num_envs, seed=seed)
    venv.reset()
    return Batched(
        "GroupSupportVecEnv (SB3 VecEnv; the ids have no vector_entry_point yet)",
        num_envs, int(venv.action_space.n), venv.step, venv.action_masks, venv.close,
    )


def make_cartpole(num_envs: int, seed: int = 0) -> Batched:
    """gymnasium's batched CartPole at the same N (every action valid)."""
    venv = gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="vector_entry_point")
    venv.reset(seed=seed)
    n_actions = int(venv.single_action_space.n)
    ones = np.ones((num_envs, n_actions), dtype=bool)
    return Batched(type(venv).__name__, num_envs, n_actions, venv.step, lambda: ones, venv.close)


def sample_valid(
    rng: np.random.Generator, masks: np.ndarray, draws: int = 8, tries: int = 16, dense_below: int = 16_384
) -> np.ndarray:
    """One action per row of ``masks`` (N, A), uniform over the row's valid (nonzero) entries.

    Small batches (N × A < ``dense_below``) score every action at random and take the best
    valid one (a few vectorised calls). Larger ones use rejection sampling: ``draws`` uniform candidates over all A actions per row, the first
    valid one taken (uniform over the valid ones); rows with none draw again. A call reads
    O(N × draws) mask entries instead of the O(N × A) of scoring every action (1.2 ms at
    N = 1024 for Family's 177 actions, more than a whole CartPoleVectorEnv step). Rows still
    without a valid draw after ``tries`` rounds (almost nothing valid) are drawn exactly.
    """
    n, a = masks.shape
    if n * a < dense_below:
        return np.where(masks.astype(bool), rng.random((n, a)), -1.0).argmax(axis=1)
    actions = np.zeros(n, dtype=np.int64)
    todo = np.arange(n)
    for _ in range(tries):
        cand = rng.integers(a, size=(todo.size, draws))
        ok = masks[todo[:, None], cand].astype(bool)
        first = ok.argmax(axis=1)
        hit = ok[np.arange(todo.size), first]
        actions[todo[hit]] = cand[hit, first[hit]]
        todo = todo[~hit]
        if todo.size == 0:
            return actions
    scores = np.where(masks[todo].astype(bool), rng.random((todo.size, a)), -1.0)
    actions[todo] = scores.argmax(axis=1)
    return actions


def time_batched(env: Batched, seconds: float, rng: np.random.Generator) -> float:
    """env-steps/s over about ``seconds`` of masked random stepping (after a short warm-up)."""
    for _ in range(3):
        env.step(sample_valid(rng, env.masks()))
    calls, t0 = 0, time.perf_counter()
    while True:
        for _ in range(8):
            env.step(sample_valid(rng, env.masks()))
        calls += 8
        dt = time.perf_counter() - t0
        if dt >= seconds:
            return calls * env.num_envs / dt


def time_kernel(env: Batched, seconds: float, rng: np.random.Generator) -> float:
    """µs per call of the simulator core's step alone (valid actions drawn beforehand; the
    core's own auto-resets): what the env's step costs without its wrapper."""
    assert env.kernel is not None
    actions = [sample_valid(rng, env.masks()) for _ in range(16)]
    calls, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        env.kernel(actions[calls % 16])
        calls += 1
    return (time.perf_counter() - t0) / calls * 1e6


def time_sampler(num_envs: int, n_actions: int, seconds: float, rng: np.random.Generator) -> float:
    """µs per call of the sampler alone on an (N, A) mask."""
    masks = np.ones((num_envs, n_actions), dtype=bool)
    masks[:, n_actions // 2 :] = False
    calls, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        sample_valid(rng, masks)
        calls += 1
    return (time.perf_counter() - t0) / calls * 1e6


def time_single(env: gym.Env, seconds: float, rng: np.random.Generator, seed: int) -> float:
    """µs per ``step`` of one Gymnasium env (masked random actions, resets at episode ends)."""
    _, info = env.reset(seed=seed)
    n = int(env.action_space.n)
    steps, t0 = 0, time.perf_counter()
    while True:
        for _ in range(32):
            mask = info.get("action_mask")
            a = int(sample_valid(rng, (mask if mask is not None else np.ones(n, bool))[None])[0])
            _, _, term, trunc, info = env.step(a)
            if term or trunc:
                _, info = env.reset()
        steps += 32
        dt = time.perf_counter() - t0
        if dt >= seconds:
            return dt / steps * 1e6


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _memory_child(scenario: str, num_envs: int, out: Any) -> None:
    # warm everything a first batch pays once (imports, data, compiled kernels) on a small one
    small = make_batched(scenario, 2)
    small.step(sample_valid(np.random.default_rng(0), small.masks()))
    small.close()
    gc.collect()
    rss0 = _rss_bytes()
    tracemalloc.start()
    env = make_batched(scenario, num_envs)
    rng = np.random.default_rng(0)
    for _ in range(100):
        env.step(sample_valid(rng, env.masks()))
    gc.collect()
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    out.put((_rss_bytes() - rss0, current, peak, env.route))


def memory_per_session(scenario: str, num_envs: int) -> tuple[float, float, float, str]:
    """(RSS growth, tracemalloc current, tracemalloc peak) in bytes per session, measured in a
    fresh process, and the route."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_memory_child, args=(scenario, num_envs, q))
    p.start()
    rss, cur, peak, route = q.get()
    p.join()
    return rss / num_envs, cur / num_envs, peak / num_envs, route


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 64, 256, 1024])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.5, help="time per (env, N) per round")
    parser.add_argument("--scenarios", nargs="+", default=list(ENV_IDS), choices=list(ENV_IDS))
    parser.add_argument("--mem-n", type=int, default=1024, help="N for the memory figure (0: skip)")
    parser.add_argument("--quick", action="store_true", help="2 rounds of 0.15 s, memory at N = 256")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.seconds, args.mem_n = 2, 0.15, min(args.mem_n, 256)
    rng = np.random.default_rng(0)

    # batched ------------------------------------------------------------------------------
    envs: dict[tuple[str, int], Batched] = {}
    for n in args.sizes:
        envs["cartpole", n] = make_cartpole(n)
        for s in args.scenarios:
            envs[s, n] = make_batched(s, n)
    print("batched route:", envs[args.scenarios[0], args.sizes[0]].route)
    rates: dict[tuple[str, int], list[float]] = {k: [] for k in envs}
    for _ in range(args.rounds):
        for n in args.sizes:
            for name in ["cartpole", *args.scenarios]:
                rates[name, n].append(time_batched(envs[name, n], args.seconds, rng))
    sampler = {
        (s, n): time_sampler(n, envs[s, n].n_actions, min(args.seconds, 0.2), rng) for s in args.scenarios for n in args.sizes
    }
    kernel = {
        (s, n): statistics.median(time_kernel(envs[s, n], min(args.seconds, 0.2), rng) for _ in range(args.rounds))
        for s in args.scenarios for n in args.sizes if envs[s, n].kernel is not None
    }
    for env in envs.values():
        env.close()
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"\nenv-steps/s, masked random actions, auto-resets; median of {args.rounds} rounds × {args.seconds} s")
    header = f"{'N':>6} {'CartPoleVectorEnv':>18}" + "".join(f" {s:>11} {'ratio':>6} {'sampler µs':>10}" for s in args.scenarios)
    print(header)
    for n in args.sizes:
        line = f"{n:>6} {med['cartpole', n] / 1e3:>17.1f}k"
        for s in args.scenarios:
            line += f" {med[s, n] / 1e3:>10.1f}k {med[s, n] / med['cartpole', n]:>6.3f} {sampler[s, n]:>10.1f}"
        print(line)
    if kernel:
        print("\nbreakdown, µs per call: the whole loop's step (step + mask read + sampler), the core's step alone")
        print(f"{'N':>6} {'CartPole loop':>14}" + "".join(f" {s + ' loop':>12} {s + ' core':>12}" for s in args.scenarios))
        for n in args.sizes:
            line = f"{n:>6} {n / med['cartpole', n] * 1e6:>14.1f}"
            for s in args.scenarios:
                line += f" {n / med[s, n] * 1e6:>12.1f} {kernel.get((s, n), float('nan')):>12.1f}"
            print(line)

    # single env ---------------------------------------------------------------------------
    singles = {"CartPole-v1": gym.make("CartPole-v1"), **{s: gym.make(ENV_IDS[s]) for s in args.scenarios}}
    us: dict[str, list[float]] = {k: [] for k in singles}
    for r in range(args.rounds):
        for name, env in singles.items():
            us[name].append(time_single(env, args.seconds, rng, seed=r))
    ref = statistics.median(us["CartPole-v1"])
    print(f"\nsingle env (gym.make, wrappers included): µs/step, median of {args.rounds} rounds")
    for name, ts in us.items():
        print(f"{name:>12} {statistics.median(ts):>8.1f} µs  {statistics.median(ts) / ref:>6.2f}× CartPole-v1")

    # memory -------------------------------------------------------------------------------
    if args.mem_n:
        print(f"\nmemory per session at N = {args.mem_n} (fresh process; build + 100 steps)")
        for s in args.scenarios:
            rss, cur, peak, _ = memory_per_session(s, args.mem_n)
            print(f"{s:>12} RSS growth {rss / 1024:8.1f} KiB   tracemalloc current {cur / 1024:8.1f} KiB, peak {peak / 1024:8.1f} KiB")


if __name__ == "__main__":
    main()
