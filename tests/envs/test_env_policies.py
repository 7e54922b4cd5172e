"""Targeting the most distressed member pays (issue 3, "Done when" 3, last clause).

Over 200 seeded episodes per policy (the same seeds for every policy, default parameters,
no transcript), a therapist that always addresses the member with the highest distress in
``info["state"]`` earns a higher mean σ* return than one that never intervenes and than a
uniformly random one over the action mask. The strategy is fixed per pattern: the one whose
calibrated effect calms a targeted member most in that pattern (``params.effect``).
The figures are printed (``pytest -s``) with 95 % intervals.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from rescue_env.envs.gym_env import GroupSupportEnv

EPISODES = 200
Policy = Callable[[dict], int]


def _returns(env: GroupSupportEnv, policy: Policy) -> np.ndarray:
    out = np.empty(EPISODES)
    for ep in range(EPISODES):
        _, info = env.reset(seed=ep)
        while True:
            _, _, term, trunc, info = env.step(policy(info))
            if term or trunc:
                out[ep] = info["sigma_return"]
                break
    return out


def _policies(env: GroupSupportEnv) -> dict[str, Policy]:
    enc = env.encoding
    params = env.params
    best = np.argmin(params.effect, axis=1)  # per pattern state: the most calming strategy
    rng = np.random.default_rng(2024)

    def target_worst(info):
        st = info["state"]
        target = int(np.argmax(st.distress))  # individual target options come first, by slot
        return enc.encode(target, int(best[params.pattern_index(st.pattern)]))

    def target_least(info):
        st = info["state"]
        return enc.encode(int(np.argmin(st.distress)), int(best[params.pattern_index(st.pattern)]))

    def never(info):
        return 0

    def random(info):
        return int(rng.choice(np.flatnonzero(info["action_mask"])))

    return {"target_worst": target_worst, "never": never, "random": random, "target_least": target_least}


def _ci(x: np.ndarray) -> float:
    return 1.96 * x.std(ddof=1) / np.sqrt(len(x))


@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_targeting_the_most_distressed_beats_never_and_random(scenario):
    env = GroupSupportEnv(scenario, record_transcript=False)
    pols = _policies(env)
    ret = {name: _returns(env, pol) for name, pol in pols.items()}
    lines = [f"{scenario}: mean σ* return over {EPISODES} seeded episodes (95 % CI)"]
    for name, r in ret.items():
        lines.append(f"  {name:<13} {r.mean():8.3f} ± {_ci(r):.3f}")
    for other in ("never", "random", "target_least"):
        diff = ret["target_worst"] - ret[other]  # paired: the same seeds for every policy
        lines.append(f"  target_worst − {other:<12} {diff.mean():+8.3f} ± {_ci(diff):.3f} (paired)")
    print("\n".join(lines))
    for other in ("never", "random"):
        assert ret["target_worst"].mean() > ret[other].mean(), other
        diff = ret["target_worst"] - ret[other]
        assert diff.mean() - _ci(diff) > 0, f"the gain over {other} is not significant: {diff.mean():.3f} ± {_ci(diff):.3f}"
    # the bucket effect in σ*: the same strategy aimed at the least distressed member earns less
    assert ret["target_worst"].mean() > ret["target_least"].mean()
