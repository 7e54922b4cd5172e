"""The group objective σ* (DESIGN.md §1) as a per-step reward.

    r_t = − w_mean · mean_i d_t^i + β · mean_{i≠j} g_ij − λ · max_i d_t^i − c · z_t

The ``λ`` term is the bucket effect: the group is only as well as its most distressed
member. Each component is reported separately (``info["sigma"]``) so a run can show what
drives the return; the discounted return with ``gamma`` is reported at episode end. The
arithmetic is the simulator core's (:func:`rescue_env.core._finish`); this module holds the
weights.
"""

from __future__ import annotations

from dataclasses import dataclass

from rescue_env.validation import check_range

#: Largest σ* weight. Only the weights' ratios shape a policy, so a weight beyond this is a
#: typo; near 1e308 one step's reward, or the return over an episode, overflows to -inf.
MAX_WEIGHT = 1e6


@dataclass(frozen=True)
class RewardConfig:
    """Weights of σ*.

    Attributes:
        w_mean: weight of the mean distress of the group.
        beta: weight of the mean stance (warmth) between members.
        lam: weight of the worst-off member's distress (bucket effect).
        cost: cost of one intervention (speaking has a price: clients need room).
        gamma: discount of the reported episode return.

    Frozen: an env keeps the weights it was given until it is handed a new config
    (``env.reward_cfg = RewardConfig(...)``), so a weight cannot change behind the core's back.
    """

    w_mean: float = 1.0
    beta: float = 0.5
    lam: float = 1.0
    cost: float = 0.05
    gamma: float = 0.99

    def __post_init__(self) -> None:
        # checked here, where every path (config, env, vector env, training) builds its
        # weights: check_range refuses inf and NaN (σ* -inf or NaN, which metrics.json and
        # episodes.jsonl cannot hold) and a negative weight turns the objective around
        # (distress, coldness or talking rewarded)
        for name in ("w_mean", "beta", "lam", "cost"):
            check_range(self, name, 0.0, MAX_WEIGHT)
        check_range(self, "gamma", 0.0, 1.0)
