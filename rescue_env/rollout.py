"""Closed-loop episodes of therapist agents, and their summary metrics.

:func:`run_episode` plays one agent on one seeded episode of a
:class:`~rescue_env.envs.gym_env.GroupSupportEnv` and returns an :class:`EpisodeRecord`
(the benchmark-schema transcript plus the per-step trace). :func:`summarise` turns a list of
records into the per-agent figures the main job reports: σ* return (mean, 95 % t-interval),
each reward component, final and peak worst-off distress, untended turns, intervention
rate and pattern shares.

Episodes are seeded per (seed dialogue, episode index), identically for every agent, so
agents are compared on the same starting states (common random numbers).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from scipy import stats

from rescue_env.data.schema import Dialogue
from rescue_env.envs.gym_env import GroupSupportEnv


class _Agent(Protocol):
    name: str

    def reset(self, *, seed: int | None = None) -> None: ...

    def act(self, observation: Any, action_mask: np.ndarray, state: Any = None) -> int: ...


def episode_seed(base_seed: int, sample_id: str, episode: int) -> int:
    """The reset seed of episode ``episode`` on seed dialogue ``sample_id`` (same for every agent)."""
    return (base_seed * 1_000_003 + zlib.crc32(sample_id.encode()) * 101 + episode) % (2**31 - 1)


@dataclass
class EpisodeRecord:
    """One finished (or failed) episode."""

    agent: str
    scenario: str
    seed_sample_id: str
    episode: int
    seed: int
    stats: dict[str, Any] = field(default_factory=dict)
    #: per step: distress list, pattern, intervened, strategy, target label
    trace: list[dict[str, Any]] = field(default_factory=list)
    dialogue: Dialogue | None = None
    failed: bool = False
    error: str = ""

    @property
    def sigma_return(self) -> float:
        return float(self.stats.get("sigma_return", float("nan")))

    def to_json(self) -> dict[str, Any]:
        """The ``episodes.jsonl`` line: the benchmark record plus the episode's figures."""
        base = self.dialogue.to_dict() if self.dialogue is not None else {"sample_id": self.key, "scenario": self.scenario, "rows": []}
        base.update(
            agent=self.agent,
            episode=self.episode,
            episode_seed=self.seed,
            seed_sample_id=self.seed_sample_id,
            sigma_return=self.stats.get("sigma_return"),
            episode_stats=self.stats,
            trace=self.trace,
            failed=self.failed,
            error=self.error,
        )
        return base

    @property
    def key(self) -> str:
        return f"rollout/{self.agent}/{self.seed_sample_id}/ep{self.episode}"


def run_episode(env: GroupSupportEnv, agent: _Agent, sample_id: str, episode: int, base_seed: int) -> EpisodeRecord:
    """Play ``agent`` for one episode starting from seed dialogue ``sample_id``."""
    seed = episode_seed(base_seed, sample_id, episode)
    obs, info = env.reset(seed=seed, options={"dialogue": sample_id})
    agent.reset(seed=seed)
    record = EpisodeRecord(agent.name, env.scenario, sample_id, episode, seed)
    members = list(env.session.members)  # type: ignore[union-attr]
    record.trace.append(_trace_point(info["state"], None, None, members))
    done = False
    while not done:
        action = int(agent.act(obs, info["action_mask"], info["state"]))
        obs, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        decision = env.encoding.decode(action) if not info["invalid_action"] else None
        record.trace.append(_trace_point(info["state"], decision, env, members))
    record.stats = info["episode"]
    if env.record_transcript:
        record.dialogue = env.session.to_dialogue(  # type: ignore[union-attr]
            sample_id=record.key, agent=agent.name, episode=episode, sigma_return=record.sigma_return
        )
    return record


def _trace_point(state, decision, env, members) -> dict[str, Any]:
    point: dict[str, Any] = {
        "distress": [round(float(x), 4) for x in state.distress],
        "stance": [[round(float(x), 3) for x in row] for row in state.stance],
        "pattern": state.pattern,
        "intervened": bool(decision is not None and decision.intervene),
    }
    if decision is not None and decision.intervene:
        point["strategy"] = env.encoding.strategy_names[decision.strategy]
        point["target"] = env.encoding.target_label(decision.target, members)
    return point


# ---------------------------------------------------------------------------------------------
# summaries


def mean_ci(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """Mean and half-width of the Student-t confidence interval (0 for fewer than 2 values)."""
    xs = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if len(xs) == 0:
        return float("nan"), float("nan")
    if len(xs) < 2:
        return float(xs.mean()), 0.0
    half = float(stats.t.ppf(0.5 + confidence / 2, len(xs) - 1) * xs.std(ddof=1) / math.sqrt(len(xs)))
    return float(xs.mean()), half


def summarise(records: list[EpisodeRecord]) -> dict[str, Any]:
    """Figures of one agent's episodes (failed episodes are counted, not averaged)."""
    ok = [r for r in records if not r.failed]
    out: dict[str, Any] = {"episodes": len(records), "failed": len(records) - len(ok)}
    if not ok:
        return out
    mean, half = mean_ci([r.sigma_return for r in ok])
    out["sigma_return_mean"] = mean
    out["sigma_return_ci95"] = half
    for comp in ok[0].stats["sigma"]:
        out[f"sigma_{comp}"] = float(np.mean([r.stats["sigma"][comp] for r in ok]))
    out["final_max_distress"] = float(np.mean([r.stats["final_max_distress"] for r in ok]))
    out["peak_max_distress"] = float(np.mean([r.stats["peak_max_distress"] for r in ok]))
    out["final_mean_distress"] = float(np.mean([r.stats["final_mean_distress"] for r in ok]))
    untended = [np.mean(list(r.stats["untended_turns"].values())) for r in ok]
    worst_untended = [max(r.stats["untended_turns"].values()) for r in ok]
    out["untended_turns_mean"] = float(np.mean(untended))
    out["untended_turns_max_member"] = float(np.mean(worst_untended))
    steps = sum(r.stats["steps"] for r in ok)
    out["steps"] = steps
    out["intervention_rate"] = float(sum(r.stats["interventions"] for r in ok) / max(steps, 1))
    counts: dict[str, int] = {}
    total = 0
    for r in ok:
        for point in r.trace[1:]:
            key = point["pattern"] or "none"
            counts[key] = counts.get(key, 0) + 1
            total += 1
    out["pattern_shares"] = {k: v / total for k, v in sorted(counts.items(), key=lambda kv: -kv[1])}
    return out


def record_from_json(obj: dict[str, Any]) -> EpisodeRecord:
    """Rebuild an :class:`EpisodeRecord` from its ``episodes.jsonl`` line (for resume)."""
    from rescue_env.data.loader import parse_dialogue

    dialogue = None
    if obj.get("rows"):
        dialogue, problems = parse_dialogue({k: v for k, v in obj.items() if k not in ("trace", "episode_stats")})
        if dialogue is None:
            raise ValueError(f"episode {obj.get('sample_id')!r} in episodes.jsonl is not a valid record: {problems[0]}")
    return EpisodeRecord(
        agent=obj["agent"],
        scenario=obj.get("scenario", "couple"),
        seed_sample_id=obj["seed_sample_id"],
        episode=int(obj["episode"]),
        seed=int(obj.get("episode_seed", 0)),
        stats=obj.get("episode_stats") or {},
        trace=obj.get("trace") or [],
        dialogue=dialogue,
        failed=bool(obj.get("failed")),
        error=obj.get("error") or "",
    )
