"""Closed-loop episodes of therapist agents, and their summary metrics.

:func:`run_episode` plays one agent on one seeded episode of a
:class:`~rescue_env.envs.gym_env.GroupSupportEnv` and returns an :class:`EpisodeRecord`
(the benchmark-schema transcript plus the per-step trace). :func:`summarise` turns a list of
records into the per-agent figures the main job reports: σ* return (mean, 95 % t-interval),
each reward component, final and peak worst-off distress, untended turns, intervention
rate and pattern shares.

Episodes are seeded per (seed dialogue, episode index), identically for every agent, so
agents are compared on the same starting states (common random numbers).

:func:`run_episodes` is the runner of a whole job (``rescue rollout`` calls it): it plays the
:class:`EpisodeJob` s that its :class:`EpisodeJournal` (the run folder's episodes file,
:func:`episodes_file`) does not hold yet,
``max_in_flight`` at a time (1 = one after another), appending each as it finishes, and
ends with the file in the jobs' order. :func:`arun_episode` is one episode as a coroutine
(the agent's ``aact`` and the env's ``astep`` are awaited, so LLM episodes share one event
loop) and :func:`arun_episodes` plays many at once. An agent's ``utterance`` (the LLM
therapist's words) becomes the text of its therapist row. A backend or agent raising
:class:`EpisodeFailed` (e.g. an LLM call that failed for good) ends that episode as a failed
record with the reason; the other episodes go on, and a later run redoes it.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import logging
import math
import os
import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from scipy import stats

from rescue_env.concurrency import request_priority
from rescue_env.data.schema import Dialogue
from rescue_env.jsonl import GZIP_MAGIC, decode, dumps, encode_line
from rescue_env.envs.gym_env import GroupSupportEnv


class EpisodeFailed(RuntimeError):
    """Raised by a client backend or an agent when an episode cannot go on (e.g. an LLM call
    that failed after its retries). The runners record the episode as failed with this
    message and go on with the others."""


class _Agent(Protocol):
    name: str

    def reset(self, *, seed: int | None = None) -> None: ...

    def act(self, observation: Any, action_mask: np.ndarray, state: Any = None) -> int: ...


def record_key(agent: str, sample_id: str, episode: int) -> str:
    """The key of an episode in ``episodes.jsonl``: which agent played which seed dialogue,
    the how-many-th time (``rollout/AGENT/SAMPLE_ID/epN``; also the records' ``sample_id``)."""
    return f"rollout/{agent}/{sample_id}/ep{episode}"


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
        """The episode's key in ``episodes.jsonl`` (:func:`record_key`)."""
        return record_key(self.agent, self.seed_sample_id, self.episode)


def _utterance(agent: Any, action: int) -> str:
    return str(getattr(agent, "utterance", "") or "") if action else ""


def _attach(env: GroupSupportEnv, agent: Any, tag: str | None) -> None:
    """Give the backend and the agent the episode's session (LLM personas and therapist read
    its transcript); ``tag`` accounts their LLM calls to the episode."""
    for part in (env.backend, agent):
        attach = getattr(part, "attach", None)
        if attach is not None:
            attach(env.session, tag=tag)


def _begin(env: GroupSupportEnv, agent: _Agent, sample_id: str, episode: int, base_seed: int, tag: str | None):
    seed = episode_seed(base_seed, sample_id, episode)
    record = EpisodeRecord(agent.name, env.scenario, sample_id, episode, seed)
    obs, info = env.reset(seed=seed, options={"dialogue": sample_id})
    agent.reset(seed=seed)
    _attach(env, agent, tag)
    members = list(env.session.members)  # type: ignore[union-attr]
    record.trace.append(_trace_point(info["state"], None, None, members))
    return record, obs, info, members


def _finish(record: EpisodeRecord, env: GroupSupportEnv, agent: Any, info: dict[str, Any] | None, error: str = "") -> EpisodeRecord:
    if error:
        record.failed, record.error = True, error
    else:
        record.stats = info["episode_stats"]  # type: ignore[index]
        if hasattr(agent, "episode_fallbacks"):
            record.stats["therapist_fallbacks"] = int(agent.episode_fallbacks)
    if env.record_transcript and env.session is not None:
        # a failed episode keeps its transcript up to the failure
        extras = {} if error else {"sigma_return": record.sigma_return}
        record.dialogue = env.session.to_dialogue(sample_id=record.key, agent=agent.name, episode=record.episode, **extras)
    return record


def run_episode(
    env: GroupSupportEnv, agent: _Agent, sample_id: str, episode: int, base_seed: int, *, tag: str | None = None
) -> EpisodeRecord:
    """Play ``agent`` for one episode starting from seed dialogue ``sample_id``.

    An :class:`EpisodeFailed` from the backend or the agent gives a failed record with the
    reason instead of an exception.
    """
    record, obs, info, members = _begin(env, agent, sample_id, episode, base_seed, tag)
    done = False
    try:
        while not done:
            action = int(agent.act(obs, info["action_mask"], info["state"]))
            obs, info, done = _advance(env, record, members, action, _utterance(agent, action))
    except EpisodeFailed as exc:
        return _finish(record, env, agent, None, str(exc) or type(exc).__name__)
    return _finish(record, env, agent, info)


def _advance(env: GroupSupportEnv, record: EpisodeRecord, members: list[str], action: int, text: str) -> tuple[Any, dict[str, Any], bool]:
    """Play one step and trace it; returns (observation, info, episode over)."""
    if text:
        env.say(text)
    obs, _, terminated, truncated, info = env.step(action)
    _trace(env, record, members, action, info)
    return obs, info, terminated or truncated


def _trace(env: GroupSupportEnv, record: EpisodeRecord, members: list[str], action: int, info: dict[str, Any]) -> None:
    decision = env.encoding.decode(action) if not info["invalid_action"] else None
    record.trace.append(_trace_point(info["state"], decision, env, members))


async def arun_episode(
    env: GroupSupportEnv, agent: _Agent, sample_id: str, episode: int, base_seed: int, *, tag: str | None = None,
    priority: Callable[[int], int] | None = None,
) -> EpisodeRecord:
    """:func:`run_episode` as a coroutine: awaits the agent's ``aact`` (when it has one) and
    the env's ``astep`` (the step's LLM calls), so episodes run concurrently on one event
    loop. Same seeds, same episode.
    ``priority(t)`` is the request priority of step ``t``'s LLM calls (default ``t``)."""
    record, obs, info, members = _begin(env, agent, sample_id, episode, base_seed, tag)
    aact = getattr(agent, "aact", None)
    done = False
    token = request_priority.set(0)  # restored at the end: the caller's calls keep theirs
    try:
        while not done:
            # the priority of this step's LLM calls (lower first; see arun_episodes)
            t = env.session.t  # type: ignore[union-attr]
            request_priority.set(priority(t) if priority is not None else t)
            if aact is not None:
                action = int(await aact(obs, info["action_mask"], info["state"]))
            else:
                action = int(agent.act(obs, info["action_mask"], info["state"]))
            obs, _, terminated, truncated, info = await env.astep(action, therapist_text=_utterance(agent, action))
            done = terminated or truncated
            _trace(env, record, members, action, info)
    except EpisodeFailed as exc:
        return _finish(record, env, agent, None, str(exc) or type(exc).__name__)
    finally:
        request_priority.reset(token)
    return _finish(record, env, agent, info)


@dataclass(frozen=True)
class EpisodeJob:
    """One episode to run: an agent on a seed dialogue, the ``episode``-th time."""

    scenario: str
    agent: str
    sample_id: str
    episode: int

    @property
    def key(self) -> str:
        """The episode's key in ``episodes.jsonl`` (:func:`record_key`)."""
        return record_key(self.agent, self.sample_id, self.episode)


async def arun_episodes(
    jobs: Sequence[EpisodeJob],
    *,
    make_env: Callable[[str], GroupSupportEnv],
    make_agent: Callable[[str, str, GroupSupportEnv], Any],
    base_seed: int,
    max_in_flight: int,
    on_done: Callable[[EpisodeRecord], None] | None = None,
) -> list[EpisodeRecord]:
    """Run ``jobs`` concurrently on this event loop, at most ``max_in_flight`` at a time.

    ``make_env(scenario)`` builds an env and ``make_agent(scenario, agent_name, env)`` an
    agent, each only when none is free: both serve one episode at a time and are then
    reused (``reset`` reseeds them), so a run of one in flight builds one env per scenario
    and one agent per (scenario, agent). ``on_done(record)`` is called as each episode
    finishes (in finishing order); the records are returned in the order of ``jobs``.
    Episodes are seeded per job, so the order in which they run does not change them.

    Their LLM requests queue for the client's slots in the order admission index + steps
    played × ``max_in_flight`` (:data:`~rescue_env.concurrency.request_priority`): an
    episode admitted late, or slowed by retries, is served before those ahead of it, so
    the episodes in flight keep pace and the run does not end on a slow tail.
    """
    envs: dict[str, list[GroupSupportEnv]] = defaultdict(list)
    agents: dict[tuple[str, str], list[Any]] = defaultdict(list)
    window = max(1, int(max_in_flight))
    gate = asyncio.Semaphore(window)
    admitted = itertools.count()
    records: list[EpisodeRecord | None] = [None] * len(jobs)

    async def one(i: int, job: EpisodeJob) -> None:
        async with gate:
            env = envs[job.scenario].pop() if envs[job.scenario] else make_env(job.scenario)
            pool = agents[job.scenario, job.agent]
            agent = None
            try:
                agent = pool.pop() if pool else make_agent(job.scenario, job.agent, env)
                seq = next(admitted)
                record = await arun_episode(
                    env, agent, job.sample_id, job.episode, base_seed, tag=job.key, priority=lambda t: seq + t * window
                )
            finally:
                envs[job.scenario].append(env)
                if agent is not None:
                    pool.append(agent)
            record.agent = job.agent
            records[i] = record
            if on_done is not None:
                on_done(record)

    try:
        async with asyncio.TaskGroup() as group:
            for i, job in enumerate(jobs):
                group.create_task(one(i, job))
    except BaseExceptionGroup as eg:  # a bug in one episode stops the run: raise it plainly
        raise eg.exceptions[0] from None
    return records  # type: ignore[return-value]


#: A run folder's episodes file: gzip JSON Lines (what a run writes by default) ...
EPISODES_GZ = "episodes.jsonl.gz"
#: ... or plain JSON Lines (``compress=false``, and every run folder of older versions).
EPISODES_PLAIN = "episodes.jsonl"
#: Both names, the default first.
EPISODES_FILES = (EPISODES_GZ, EPISODES_PLAIN)


class RunFolderError(ValueError):
    """A run folder no command can use as it is (it holds both episodes files): the message
    names the files and the fix."""


def episodes_file(run_dir: str | Path, *, compress: bool = True) -> Path:
    """The episodes file of the run folder ``run_dir``: the one there (a folder of an older
    version keeps its plain ``episodes.jsonl``; a resumed run appends to the form it finds),
    else the one a new run writes: ``episodes.jsonl.gz`` when ``compress``, else
    ``episodes.jsonl``. Readers check ``.is_file()`` on the result.

    Raises:
        RunFolderError: the folder holds both files (which one holds the run is unknown).
    """
    folder = Path(run_dir)
    found = [folder / name for name in EPISODES_FILES if (folder / name).is_file()]
    if len(found) > 1:
        raise RunFolderError(
            f"{folder} holds both {EPISODES_GZ} and {EPISODES_PLAIN}, so which one holds the run is unknown: "
            f"keep one (compare them with `zcat {found[0]} | cmp - {found[1]}`), move the other out of the folder, "
            "and run the command again"
        )
    if found:
        return found[0]
    return folder / (EPISODES_GZ if compress else EPISODES_PLAIN)


class EpisodeJournal:
    """A run folder's episodes file (:func:`episodes_file`), kept whole under crashes and
    Ctrl-C; gzip JSON Lines or plain.

    - Each finished episode is appended by a single ``write`` to an ``O_APPEND`` descriptor,
      then ``fsync``: as one line, or, gzip, as one whole gzip member holding its line
      (:func:`rescue_env.jsonl.encode_line`). A killed process leaves whole lines (members)
      and at most one torn one at the end.
    - Opening an existing file cuts a torn last line or member (from a crash elsewhere) and
      reads the episodes there (:func:`read_journal`); a key seen twice keeps its last line.
    - The form: an existing non-empty file keeps its own (told by its first bytes, so a
      resumed run never mixes forms in one file); a new or empty one is gzip when ``path``
      ends in ``.gz``.
    - :meth:`rewrite` replaces the file atomically (temporary file, then ``os.replace``) by
      one line per key in a given order, so runs that finished episodes in different orders
      (concurrency, resume) end with the same bytes.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lines: dict[str, str] = {}
        self._records: dict[str, EpisodeRecord] = {}
        for line, record in read_journal(self.path):
            self._lines.pop(record.key, None)
            self._lines[record.key] = line
            self._records[record.key] = record
        try:
            with self.path.open("rb") as fh:
                head = fh.read(len(GZIP_MAGIC))
        except FileNotFoundError:
            head = b""
        #: lines are written as gzip members
        self.compress = head == GZIP_MAGIC if head else self.path.name.endswith(".gz")
        # the bytes appended per key, reused by rewrite (compressing once per episode)
        self._encoded: dict[str, bytes] = {}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def __enter__(self) -> EpisodeJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def records(self) -> dict[str, EpisodeRecord]:
        """Episodes in the file by key (failed ones included)."""
        return dict(self._records)

    @property
    def done(self) -> set[str]:
        """Keys of the episodes in the file that finished (not failed): a rerun skips them."""
        return {key for key, record in self._records.items() if not record.failed}

    def append(self, record: EpisodeRecord) -> None:
        """Append ``record`` as one whole line (gzip: one whole member), on disk when this returns."""
        if self._fd is None:
            raise RuntimeError(f"{self.path} is closed")
        line = dumps(record.to_json())  # NaN / Infinity are not JSON: refused, never written
        data = encode_line(line, compress=self.compress)
        written = 0
        while written < len(data):  # one write in practice; loop for short writes
            written += os.write(self._fd, data[written:])
        os.fsync(self._fd)
        self._lines.pop(record.key, None)
        self._lines[record.key] = line
        self._encoded[record.key] = data
        self._records[record.key] = record

    def rewrite(self, order: Sequence[str]) -> None:
        """Rewrite the file with one line per key: ``order``'s keys first, in that order,
        then any other key in file order."""
        keys = [k for k in dict.fromkeys(order) if k in self._lines]
        keys += [k for k in self._lines if k not in set(keys)]
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("wb") as fh:
            fh.write(b"".join(self._encoded.get(k) or encode_line(self._lines[k], compress=self.compress) for k in keys))
            fh.flush()
            os.fsync(fh.fileno())
        self.close()
        os.replace(tmp, self.path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def read_journal(path: str | Path) -> list[tuple[str, EpisodeRecord]]:
    """The whole episodes at the head of an episodes file (plain or gzip) as (line, record),
    for resume.

    Reading stops at the first line that is not a whole episode (torn by a crash, edited,
    not UTF-8; gzip: a member cut by a crash or corrupt): that line and everything after it
    are moved to ``PATH.cut-<UTC time>`` beside the file, the file keeps the good prefix
    (gzip: the whole members before it), and a warning says so. The episodes cut off are
    redone by the resumed run."""
    path = Path(path)
    if not path.exists():
        return []
    raw = path.read_bytes()
    decoded = decode(raw)
    data = decoded.data
    out: list[tuple[str, EpisodeRecord]] = []
    pos = 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        if end < 0:
            break  # no newline: the last write was torn
        try:
            line = data[pos:end].decode("utf-8")
            out.append((line, record_from_json(json.loads(line))))
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, ValueError, TypeError, AttributeError):
            break
        pos = end + 1
    keep, kept_text = decoded.whole_prefix(pos)
    out = out[: data[:kept_text].count(b"\n")]  # gzip: a member holding several lines is kept whole or not at all
    if keep < len(raw):
        torn = not data.endswith(b"\n") or decoded.cut is not None
        _cut_journal(path, raw, keep, len(out), data[kept_text:].count(b"\n") + torn)
    return out


def _cut_journal(path: Path, raw: bytes, keep: int, kept: int, cut_lines: int) -> None:
    """Move ``raw[keep:]`` to ``PATH.cut-<UTC time>`` and truncate the file to ``keep``."""
    backup = path.with_name(f"{path.name}.cut-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    backup.write_bytes(raw[keep:])
    os.truncate(path, keep)
    logging.getLogger(__name__).warning(
        "%s: line %d is not a whole episode; kept the %d episodes before it, moved the rest "
        "(%d lines) to %s; those episodes are run again", path, kept + 1, kept, cut_lines, backup.name,
    )


@dataclass
class RunOutcome:
    """What :func:`run_episodes` did."""

    #: one record per job, in the jobs' order (from the journal for jobs finished earlier)
    records: list[EpisodeRecord]
    #: the episodes this call played, in finishing order (failed ones included)
    ran: list[EpisodeRecord]
    #: seconds spent playing them
    wall_s: float

    @property
    def skipped(self) -> int:
        """Jobs the journal held already, finished."""
        return len(self.records) - len(self.ran)


def run_episodes(
    jobs: Sequence[EpisodeJob],
    journal: EpisodeJournal,
    *,
    make_env: Callable[[str], GroupSupportEnv],
    make_agent: Callable[[str, str, GroupSupportEnv], Any],
    base_seed: int,
    max_in_flight: int = 1,
    on_done: Callable[[EpisodeRecord], None] | None = None,
    closing: Sequence[Any] = (),
) -> RunOutcome:
    """Play the ``jobs`` that ``journal`` does not hold finished, ``max_in_flight`` at a time
    (1: one after another), appending each to the journal as it ends; then rewrite the
    journal in the jobs' order, so a resumed or concurrent run ends with the same file as an
    uninterrupted one. Episodes that failed in an earlier run are played again.

    ``make_env`` / ``make_agent`` as in :func:`arun_episodes`; ``on_done(record)`` after each
    append. ``closing``: objects whose ``aclose()`` coroutine is awaited on the run's event
    loop when it ends, even on an error (e.g. the LLM client its envs and agents share).
    Call it from synchronous code (it runs its own event loop). On Ctrl-C the episodes
    finished so far are in the journal and the ``KeyboardInterrupt`` goes on.
    """
    done = journal.done
    todo = [job for job in jobs if job.key not in done]
    ran: list[EpisodeRecord] = []

    def finished(record: EpisodeRecord) -> None:
        journal.append(record)
        ran.append(record)
        if on_done is not None:
            on_done(record)

    async def play() -> None:
        try:
            await arun_episodes(
                todo, make_env=make_env, make_agent=make_agent, base_seed=base_seed, max_in_flight=max_in_flight, on_done=finished
            )
        finally:
            for resource in closing:
                await resource.aclose()

    # Everything alive now (imports, data, configs: a few hundred thousand objects) lives
    # through the run: freezing it keeps the collector's full passes from re-scanning it
    # while episodes are in flight (each such pass stalled the event loop for ~0.2 s, with
    # every request waiting). Only collection work changes, not what is collected later.
    gc.freeze()
    t0 = time.perf_counter()
    try:
        asyncio.run(play())
    finally:
        gc.unfreeze()
    wall = time.perf_counter() - t0
    journal.rewrite([job.key for job in jobs])
    kept = journal.records
    return RunOutcome([kept[job.key] for job in jobs], ran, wall)


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
