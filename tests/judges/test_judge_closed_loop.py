"""Closed-loop metrics: distress reduction and strategy-path health."""

from __future__ import annotations

import pytest
from judge_fakes import make_episodes

from rescue_env.data import load_dialogues
from rescue_env.judges.closed_loop import episode_metrics, strategy_path, summarise


def test_strategy_path_health() -> None:
    good = strategy_path(["join", "track", "evoke", "reframe", "goal_align"])
    assert good["explored_before_advice"] is True and good["first_advice_turn"] == 4
    assert good["advice_position"] == pytest.approx(0.75) and good["healthy"]
    early = strategy_path(["reframe", "join", "evoke"])
    assert early["explored_before_advice"] is False and early["premature_advice"] and not early["healthy"]
    assert early["advice_position"] == 0.0
    none = strategy_path(["join", "track"])
    assert none["explored_before_advice"] is None and none["healthy"] and none["advice_position"] is None
    custom = strategy_path(["boundary", "reframe"], explore=["boundary"], advice=["reframe"])
    assert custom["explored_before_advice"] is True


def test_distress_reduction_from_the_state_column() -> None:
    ep = make_episodes(load_dialogues()[:1], agents=("heuristic",), episodes=1)[0]
    # rewrite the state column: Priya 0.8 → 0.2, Marcus 0.4 → 0.5
    for row in ep.rows:
        row.extras["state"] = {**row.extras["state"], "members": ["Priya", "Marcus"], "distress": [0.5, 0.45]}
    # the episode starts after its 3 history rows: "first" is the state after row 3
    ep.rows[0].extras["state"]["distress"] = [0.1, 0.1]
    ep.rows[2].extras["state"]["distress"] = [0.8, 0.4]
    ep.rows[-1].extras["state"]["distress"] = [0.2, 0.5]
    m = episode_metrics(ep)
    assert m.start_row == 3
    assert m.group_reduction == pytest.approx(0.6 - 0.35)
    assert m.worst_off_member == "Priya" and m.worst_off_reduction == pytest.approx(0.6)
    assert m.max_reduction == pytest.approx(0.8 - 0.5)
    assert m.agent == "heuristic" and m.sigma_return == -1.0


def test_real_dialogues_use_extracted_states_and_summary_is_per_agent() -> None:
    seeds = load_dialogues()[:2]
    ms = [episode_metrics(d) for d in seeds]
    assert all(m.agent == "reference" and len(m.first_distress) == len(d.participants) for m, d in zip(ms, seeds))
    eps = make_episodes(seeds, episodes=1)
    s = summarise([episode_metrics(d) for d in eps])
    assert set(s) == {"heuristic", "poor", "never"}
    assert s["never"]["advice_share"] == 0.0
    # the poor agent advises (goal_align) from its first own turn on
    assert s["poor"]["advice_position"] is not None and s["poor"]["advice_position"] < s["heuristic"]["advice_position"]
