"""The SB3 / sb3-contrib algorithms ``rescue train algo=`` takes (a light module: the
config checks read it without importing torch)."""

from __future__ import annotations

#: SB3 / sb3-contrib algorithms for the flat Discrete action: name → (module, class, uses the
#: action masks). The others act with their best valid action (an invalid choice is
#: replaced by it). Value-based ones (dqn, qrdqn) rank actions by their Q-values.
ALGOS: dict[str, tuple[str, str, bool]] = {
    "maskable_ppo": ("sb3_contrib", "MaskablePPO", True),
    "ppo": ("stable_baselines3", "PPO", False),
    "a2c": ("stable_baselines3", "A2C", False),
    "dqn": ("stable_baselines3", "DQN", False),
    "qrdqn": ("sb3_contrib", "QRDQN", False),
}
#: Algorithms that are refused, with why.
UNSUPPORTED_ALGOS = {
    "recurrent_ppo": "RecurrentPPO keeps an LSTM state between steps that the therapist agents do not carry, "
    "and takes no action masks",
    "sac": "SAC is for continuous actions; the therapist's action is Discrete",
    "td3": "TD3 is for continuous actions; the therapist's action is Discrete",
    "ddpg": "DDPG is for continuous actions; the therapist's action is Discrete",
    "trpo": "TRPO takes no action masks here; use maskable_ppo",
    "ars": "ARS is not wired in; use maskable_ppo",
}


def check_algo(algo: str) -> None:
    """Raise ``ValueError`` naming the supported algorithms (and why ``algo`` is not one)."""
    if algo not in ALGOS:
        why = UNSUPPORTED_ALGOS.get(algo)
        raise ValueError(
            f"unknown algo {algo!r}" + (f" ({why})" if why else "") + f": use one of {', '.join(ALGOS)} (only maskable_ppo uses the action masks)"
        )
