"""Time from ``import rescue_env`` to the first ``env.step``, with an empty numba cache (cold:
a fresh clone or install) and again with the cache that run left (warm: every later process).

Run: ``python benchmarks/cold_start.py [--runs 1]``.

Each measurement is a fresh Python subprocess whose ``NUMBA_CACHE_DIR`` points at a new
temporary directory (cold), then a second subprocess on the same directory (warm). The child
times, from just before ``import rescue_env``: ``gym.make("rescue_env/Couple-v0")``, ``reset``
and the first ``step`` (the figure the README states), then the first step of
``Family-v0`` and of the vector env (what a training run compiles on top). Wall time and the
child's CPU time are both printed: the machine may be shared, and CPU time is what the
compiler costs whatever the load. ``--runs`` repeats the cold/warm pair (medians printed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, time
t0, c0 = time.perf_counter(), time.process_time()
def mark():
    return {"wall_s": round(time.perf_counter() - t0, 2), "cpu_s": round(time.process_time() - c0, 2)}
import gymnasium as gym
import rescue_env
out = {"import": mark()}
env = gym.make("rescue_env/Couple-v0")
env.reset(seed=0)
env.step(0)
out["couple_first_step"] = mark()
env = gym.make("rescue_env/Family-v0")
env.reset(seed=0)
env.step(0)
out["family_first_step"] = mark()
venv = gym.make_vec("rescue_env/Couple-v0", num_envs=4, vectorization_mode="vector_entry_point")
venv.reset(seed=0)
venv.step(venv.action_masks().argmax(axis=1))
out["vector_first_step"] = mark()
print("RESULT " + json.dumps(out))
"""


def measure(cache_dir: str) -> dict[str, dict[str, float]]:
    """One fresh interpreter's times (seconds since ``import``) with ``cache_dir`` as the
    numba cache."""
    env = {**os.environ, "NUMBA_CACHE_DIR": cache_dir, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", _CHILD], cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"the child failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    result = json.loads(line[len("RESULT ") :])
    result["stderr"] = proc.stderr.strip().splitlines()  # type: ignore[assignment]
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1, help="cold/warm pairs (medians are printed)")
    args = parser.parse_args(argv)
    rows: dict[str, list[dict]] = {"cold": [], "warm": []}
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="numba-cold-") as cache:
            rows["cold"].append(measure(cache))
            rows["warm"].append(measure(cache))
    print(f"{'cache':<6}{'stage (time since import)':<28}{'wall s':>9}{'cpu s':>9}")
    for kind, results in rows.items():
        for stage in ("import", "couple_first_step", "family_first_step", "vector_first_step"):
            wall = statistics.median(r[stage]["wall_s"] for r in results)
            cpu = statistics.median(r[stage]["cpu_s"] for r in results)
            print(f"{kind:<6}{stage:<28}{wall:>9.2f}{cpu:>9.2f}")
    notes = [line for line in rows["cold"][0]["stderr"] if "compil" in line]
    if notes:
        print("cold run's stderr notice:", notes[0])


if __name__ == "__main__":
    main()
