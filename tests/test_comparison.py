"""Comparisons on the same episodes: the pooled set every agent played, the per-scenario
breakdown, and the paired difference's 95 % interval (checked against a hand computation)."""

from __future__ import annotations

import math

import pytest

from rescue_env.comparison import check_reference, compare, is_significant, paired_difference
from rescue_env.rollout import EpisodeRecord


def rec(agent: str, scenario: str, sample: str, episode: int, ret: float, failed: bool = False) -> EpisodeRecord:
    stats = {
        "sigma_return": ret, "sigma": {"mean_distress": ret / 2, "stance": 0.0, "max_distress": ret / 2, "intervention_cost": 0.0},
        "final_max_distress": 0.5, "peak_max_distress": 0.7, "final_mean_distress": 0.4,
        "untended_turns": {"A": 1, "B": 3}, "steps": 10, "interventions": 4,
    }
    trace = [{"pattern": "pursue_withdraw", "distress": [0.1, 0.2]}] * 3
    return EpisodeRecord(agent, scenario, sample, episode, seed=episode, stats=stats if not failed else {}, trace=trace, failed=failed)


def test_paired_interval_matches_a_hand_computation():
    # differences 1, 2, 3, 4, 10: mean 4, sd = sqrt(50/4) = 3.5355, se = 3.5355/sqrt(5) = 1.5811;
    # t(0.975, 4 df) = 2.776445 (a t table): half-width 4.38995
    ref = [rec("h", "couple", f"s{i}", 0, -10.0 - i) for i in range(5)]
    agent = [rec("a", "couple", f"s{i}", 0, -10.0 - i + d) for i, d in enumerate([1, 2, 3, 4, 10])]
    p = paired_difference(agent, ref)
    assert p["n"] == 5 and p["mean"] == pytest.approx(4.0)
    assert p["ci95"] == pytest.approx(2.776445 * math.sqrt(12.5) / math.sqrt(5), rel=1e-5)
    assert (p["ci_low"], p["ci_high"]) == pytest.approx((4 - 4.389945, 4 + 4.389945), rel=1e-5)
    assert not is_significant(p)  # the interval straddles 0


def test_pairs_are_matched_by_episode_not_by_position_and_skip_failures():
    ref = [rec("h", "couple", "s1", 0, 0.0), rec("h", "couple", "s2", 0, 10.0), rec("h", "couple", "s3", 0, 5.0, failed=True)]
    agent = [rec("a", "couple", "s2", 0, 11.0), rec("a", "couple", "s1", 0, 3.0), rec("a", "couple", "s3", 0, 0.0)]
    p = paired_difference(agent, ref)
    assert p["n"] == 2 and p["mean"] == pytest.approx(2.0)  # (11-10 + 3-0) / 2; s3 failed for h


def test_too_few_pairs_give_no_interval():
    p = paired_difference([rec("a", "couple", "s1", 0, 1.0)], [rec("h", "couple", "s1", 0, 0.0)])
    assert p["n"] == 1 and p["mean"] == 1.0 and math.isnan(p["ci_low"]) and not is_significant(p)
    assert paired_difference([], [])["n"] == 0


def test_a_scenario_one_agent_did_not_play_leaves_the_pooled_figures_for_everyone():
    h = [rec("heuristic", "couple", "c1", e, -5.0 - e) for e in range(3)] + [rec("heuristic", "family", "f1", e, -20.0) for e in range(3)]
    t = [rec("trained", "couple", "c1", e, -4.0 - e) for e in range(3)]
    c = compare({"heuristic": h, "trained": t})
    assert c["compare_to"] == "heuristic"
    assert c["scenarios"] == ["couple", "family"] and c["pooled_scenarios"] == ["couple"]
    assert c["left_out"] == {"family": ["trained"]}
    assert c["agents"]["heuristic"]["episodes"] == 3  # pooled: couples only, like the trained policy
    assert c["agents"]["heuristic"]["sigma_return_mean"] == pytest.approx(-6.0)
    assert c["agents"]["heuristic"]["by_scenario"]["family"]["episodes"] == 3
    assert list(c["agents"]["trained"]["by_scenario"]) == ["couple"]
    assert c["agents"]["trained"]["paired"]["mean"] == pytest.approx(1.0)
    assert c["agents"]["trained"]["paired"]["ci95"] == 0.0  # identical differences


def test_no_reference_in_the_run_means_no_paired_figures():
    c = compare({"never": [rec("never", "couple", "c1", 0, -1.0)]}, compare_to="heuristic")
    assert c["compare_to"] is None and "paired" not in c["agents"]["never"]


@pytest.mark.parametrize("name", ["bogus", "Heuristic", "never "])
def test_a_reference_that_is_not_an_agent_of_the_run_is_an_error(name):
    """A mistyped reference used to drop the Δ columns without a word."""
    records = {"never": [rec("never", "couple", "c1", 0, -1.0)], "heuristic": [rec("heuristic", "couple", "c1", 0, -0.5)]}
    with pytest.raises(ValueError, match=f"compare_to={name!r} is not an agent of this run; name one of never, heuristic"):
        compare(records, compare_to=name)
    with pytest.raises(ValueError):
        check_reference(name, list(records))


def test_the_default_reference_must_run_only_when_named():
    check_reference(None, ["never"])
    check_reference("heuristic", ["never"], named=False)  # the default: the run simply has no Δ
    with pytest.raises(ValueError, match="not an agent of this run"):
        check_reference("heuristic", ["never"])  # named by the user (--compare-to heuristic)
