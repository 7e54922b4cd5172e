"""The group objective σ* (DESIGN.md §1) as a per-step reward.

    r_t = − w_mean · mean_i d_t^i + β · mean_{i≠j} g_ij − λ · max_i d_t^i − c · z_t

The ``λ`` term is the bucket effect: the group is only as well as its most distressed
member. Each component is reported separately (``info["sigma"]``) so a run can show what
drives the return; the discounted return with ``gamma`` is reported at episode end.
"""

from __future__ import annotations

from dataclasses import dataclass

from rescue_env.state import GroupState
from rescue_env.validation import check_range


@dataclass
class RewardConfig:
    """Weights of σ*.

    Attributes:
        w_mean: weight of the mean distress of the group.
        beta: weight of the mean stance (warmth) between members.
        lam: weight of the worst-off member's distress (bucket effect).
        cost: cost of one intervention (speaking has a price: clients need room).
        gamma: discount of the reported episode return.
    """

    w_mean: float = 1.0
    beta: float = 0.5
    lam: float = 1.0
    cost: float = 0.05
    gamma: float = 0.99

    def __post_init__(self) -> None:
        # negative weights would reward distress (λ = -5 turns σ* upside down)
        for name in ("w_mean", "beta", "lam", "cost"):
            check_range(self, name, 0.0)
        check_range(self, "gamma", 0.0, 1.0)


def sigma_star(state: GroupState, intervened: bool, cfg: RewardConfig) -> tuple[float, dict[str, float]]:
    """Step reward and its components (each already weighted, so they sum to the reward)."""
    # plain floats: numpy reductions on 2-6 values cost more than the arithmetic (hot path)
    d = state.distress.tolist()
    n = len(d)
    total = 0.0
    for x in d:  # left to right, like the batched kernel (bit-equal rewards on any Python)
        total += x
    components = {
        "mean_distress": -cfg.w_mean * (total / n if n else 0.0),
        "stance": cfg.beta * state.mean_stance(),
        "max_distress": -cfg.lam * (max(d) if n else 0.0),
        "intervention_cost": -cfg.cost * float(intervened),
    }
    return components["mean_distress"] + components["stance"] + components["max_distress"] + components["intervention_cost"], components
