"""Real dialogues cut into simulator steps, and the real therapist's moves replayed in the model.

**How a real dialogue is cut into steps.** A simulator step is one therapist turn followed by
the clients' answers. So a real dialogue's step starts at a therapist row and holds it and
every client row up to the next therapist row; the client rows before the first therapist
row are the prefix that makes the first step's state. The step's **move** is the therapist
row's: it speaks (``intervene``) when the row carries a strategy of the scenario's taxonomy
and its targets (``target`` and the strategy items' targets) name a member; the target is
those members, the strategy the row's. A therapist row without a strategy (a minimal
encourager, a question of fact) is a listening step. The **state at step t** is the state
extracted from every row before step t's therapist row (:class:`~rescue_env.state.StateTracker`:
each member's latest annotated distress and stances, the latest pattern label), so it is
what an annotator had recorded by then. The rows of a step say which members were annotated
in it (:attr:`Step.annotated`): a simulated reading is refreshed only where the real one was
(:func:`replay`), so real and simulated readings age alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from rescue_env.data.schema import Dialogue
from rescue_env.dynamics.params import ScenarioParams
from rescue_env.state import GroupState, StateTracker
from rescue_env.taxonomy.actions import ActionEncoding
from rescue_env.taxonomy.labels import strategies


@dataclass
class Step:
    """One real step: the state before it, the therapist's move, and who was annotated."""

    state: GroupState
    intervene: bool
    slots: tuple[int, ...]
    strategy: int  # index into the scenario's strategies; -1 when listening
    annotated: np.ndarray  # bool [n]: member annotated in the step's rows
    #: first annotated distress of each member within the step's rows (nan: none)
    first_reading: np.ndarray


def extract_steps(dialogue: Dialogue) -> list[Step]:
    """The dialogue cut into simulator steps (see the module docstring)."""
    strats = strategies(dialogue.scenario)
    tracker = StateTracker(dialogue.scenario, dialogue.participants)
    n = len(dialogue.participants)
    steps: list[Step] = []
    for row in dialogue.rows:
        if row.is_therapist:
            targets = list(row.target)
            for item in row.support_strategy:
                targets.extend(item.target)
            slots = tuple(sorted(tracker.addressed_slots(targets)))
            speak = row.strategy in strats and bool(slots)
            steps.append(
                Step(tracker.state.copy(), speak, slots if speak else (), strats.index(row.strategy) if speak else -1,
                     np.zeros(n, dtype=bool), np.full(n, np.nan))
            )  # fmt: skip
        st = tracker.update(row)
        if steps:
            cur = steps[-1]
            for e in row.internal_emotion:
                i = tracker.index.get(e.person)
                if i is not None:
                    if not cur.annotated[i]:
                        cur.first_reading[i] = float(st.distress[i])
                    cur.annotated[i] = True
    if steps:  # the state after the last step closes the dialogue
        steps.append(Step(tracker.state.copy(), False, (), -1, np.zeros(n, dtype=bool), np.full(n, np.nan)))
    return steps


def move_action(scenario: str, n: int, step: Step) -> int:
    """The flat action of a real step's move for a group of ``n`` (0: listening)."""
    if not step.intervene:
        return 0
    encoding = ActionEncoding(scenario, None if scenario == "couple" else max(2, min(n, 8)))
    return encoding.encode(encoding.target_for_slots(step.slots, n), step.strategy)  # type: ignore[arg-type]


@dataclass
class Replay:
    """Simulated draws of a replayed window: per draw and step k = 1..h (after k moves),
    the readings as an annotator would have them (``readings[draw, k, member]``), the latent
    distress, the pattern index and the stances."""

    readings: np.ndarray  # [draws, h+1, n] (k = 0: the real start)
    latent: np.ndarray  # [draws, h+1, n]
    pattern: np.ndarray  # [draws, h+1] int
    stance: np.ndarray  # [draws, h+1, n, n]


def replay(
    params: ScenarioParams, windows: Sequence[tuple[GroupState, Sequence[int], np.ndarray]], draws: int, seed: int, heterogeneity: float = 1.0
) -> list[Replay]:
    """Replay each window open loop in the calibrated model: from its real start state, its
    flat actions in turn (``len(actions)`` = h steps), ``draws`` times with clients drawn from
    the population. ``annotated[k, i]`` (bool ``[h, n]``) says whether member i's reading is
    refreshed after move k; where not, it keeps its previous value (the real start's at first).
    All windows must be of one group size; they run as one batch of the simulator core."""
    from rescue_env.config import EnvConfig
    from rescue_env.core import Core
    from rescue_env.dynamics.calibrated import CalibratedModel
    from rescue_env.reward import RewardConfig

    if not windows:
        return []
    n = windows[0][0].n
    h = max(len(a) for _, a, _ in windows)
    model = CalibratedModel(params.scenario, params, heterogeneity=heterogeneity)
    sessions = len(windows) * draws
    # no episode end: the windows are moved h steps whatever happens
    never = EnvConfig(params.scenario, horizon=10**9, settle_threshold=0.0, terminate_on_settle=False)
    core = Core(params, model.encoding(n), RewardConfig(), None, sessions, episode_end=never, heterogeneity=heterogeneity)
    S = core.state
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 2**63, size=sessions, dtype=np.uint64)
    for w, (state, _, _) in enumerate(windows):
        for r in range(draws):
            core.load(w * draws + r, state, key=int(keys[w * draws + r]))
    readings = np.zeros((sessions, h + 1, n))
    latent = np.zeros((sessions, h + 1, n))
    pattern = np.zeros((sessions, h + 1), dtype=np.int64)
    stance = np.zeros((sessions, h + 1, n, n))
    readings[:, 0] = latent[:, 0] = S.distress[:, :n]
    pattern[:, 0] = S.pattern
    stance[:, 0] = S.stance[:, :n, :n]
    for k in range(h):
        actions = np.array([a[k] if k < len(a) else 0 for _, a, _ in windows for _ in range(draws)], np.int64)
        core.transition(actions)
        core.finish()
        fresh = np.repeat(np.array([m[k] if k < len(m) else np.zeros(n, bool) for _, _, m in windows]), draws, axis=0)
        readings[:, k + 1] = np.where(fresh, core.obs[:, :n], readings[:, k])
        latent[:, k + 1] = S.distress[:, :n]
        pattern[:, k + 1] = S.pattern
        stance[:, k + 1] = S.stance[:, :n, :n]
    split = lambda a, w: a[w * draws : (w + 1) * draws]  # noqa: E731
    return [Replay(split(readings, w), split(latent, w), split(pattern, w), split(stance, w)) for w in range(len(windows))]



#: Rows after a therapist move within which the addressed member's next annotation counts
#: as the move's outcome (the fit's strategy effects and the fidelity check's one-step moves).
EFFECT_WINDOW = 6


@dataclass
class Move:
    """One real therapist move with an annotated outcome for one addressed member."""

    state: GroupState  # before the move
    slots: tuple[int, ...]  # the members it addresses
    strategy: int
    member: int  # the addressed member whose change is observed
    change: float  # their annotated distress within EFFECT_WINDOW rows after, minus before


def extract_moves(dialogue: Dialogue) -> list[Move]:
    """Every therapist move with a strategy of the taxonomy and an addressed member annotated
    before it and within :data:`EFFECT_WINDOW` rows after it (one per such member)."""
    strats = strategies(dialogue.scenario)
    tracker = StateTracker(dialogue.scenario, dialogue.participants)
    before_states, annotated_at = [], []
    for row in dialogue.rows:
        before_states.append(tracker.state.copy())
        st = tracker.update(row)
        annotated_at.append({tracker.index[e.person]: float(st.distress[tracker.index[e.person]]) for e in row.internal_emotion if e.person in tracker.index})
    out: list[Move] = []
    for pos, row in enumerate(dialogue.rows):
        if not row.is_therapist or row.strategy not in strats:
            continue
        targets = list(row.target)
        for item in row.support_strategy:
            targets.extend(item.target)
        slots = tuple(sorted(tracker.addressed_slots(targets)))
        before = before_states[pos]
        for i in slots:
            if np.isnan(before.intensity[i]):
                continue
            after = next((a[i] for a in annotated_at[pos + 1 : pos + 1 + EFFECT_WINDOW] if i in a), None)
            if after is not None:
                out.append(Move(before, slots, strats.index(row.strategy), i, after - float(before.distress[i])))
    return out


def simulate_moves(params: ScenarioParams, moves: Sequence[Move], draws: int, seed: int, heterogeneity: float = 1.0) -> np.ndarray:
    """Simulated changes ``[moves, draws]`` of each move's observed member: one step of the
    move from its real state, the member's next reading minus the state's."""
    out = np.zeros((len(moves), draws))
    by_size: dict[int, list[int]] = {}
    for m, move in enumerate(moves):
        by_size.setdefault(move.state.n, []).append(m)
    for n, idx in by_size.items():
        windows = []
        for m in idx:
            step = Step(moves[m].state, True, moves[m].slots, moves[m].strategy, np.ones(n, bool), np.full(n, np.nan))
            windows.append((moves[m].state, [move_action(params.scenario, n, step)], np.ones((1, n), bool)))
        for m, rep in zip(idx, replay(params, windows, draws, seed + n, heterogeneity)):
            out[m] = rep.readings[:, 1, moves[m].member] - moves[m].state.distress[moves[m].member]
    return out
