"""What each agent is supposed to do: never listens, random is seeded, the heuristic follows
its clinical rules, and ``make_agent`` errors clearly (the imitation agent: test_agents_prior.py)."""

from __future__ import annotations


import numpy as np
import pytest

from rescue_env.agents import AGENT_NAMES, make_agent
from rescue_env.agents.heuristic import HeuristicAgent
from rescue_env.envs.gym_env import GroupSupportEnv
from rescue_env.taxonomy.actions import ActionEncoding

SCENARIOS = ("couple", "family")


# --- never / random -------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_never_always_listens(scenario, build_agent, seeds, play, make_state):
    agent = build_agent("never", scenario)
    env = GroupSupportEnv(scenario)
    for sid in [d.sample_id for d in seeds if d.scenario == scenario][:2]:
        steps = play(env, agent, seed=3, options={"dialogue": sid})
        assert [s["action"] for s in steps] == [0] * len(steps)
    # even at maximal distress, and its ranking says so
    n = 2 if scenario == "couple" else 4
    hot = make_state(scenario, [1.0] * n, pattern=None)
    assert agent.act(None, env.encoding.mask(n), hot) == 0
    assert agent.rank(hot, env.encoding).p_speak == 0.0


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_random_is_seeded_and_covers_the_valid_actions(scenario, play, families, seeds):
    env = GroupSupportEnv(scenario)
    sid = families[0].sample_id if scenario == "family" else next(d.sample_id for d in seeds if d.scenario == "couple")

    def actions(seed: int) -> list[int]:
        agent = make_agent("random", scenario, seed=seed)
        return [s["action"] for s in play(env, agent, seed=11, options={"dialogue": sid})]

    a1, a2 = actions(5), actions(5)
    assert a1 == a2, "same seed, same actions"
    # the episode's own reset seed drives the agent (rollouts reseed per episode)...
    agent = make_agent("random", scenario, seed=5)
    agent.reset(seed=42)
    first = [agent.act(None, env.encoding.mask(3 if scenario == "family" else 2)) for _ in range(20)]
    agent.reset(seed=42)
    assert [agent.act(None, env.encoding.mask(3 if scenario == "family" else 2)) for _ in range(20)] == first
    # ...and a different seed gives a different draw
    mask = env.encoding.mask(3 if scenario == "family" else 2)
    r1, r2 = make_agent("random", scenario, seed=1), make_agent("random", scenario, seed=2)
    d1 = [r1.act(None, mask) for _ in range(30)]
    d2 = [r2.act(None, mask) for _ in range(30)]
    assert d1 != d2
    # uniform over allowed actions: listening is rare, many distinct valid actions are drawn
    big = [r1.act(None, mask) for _ in range(600)]
    assert all(mask[a] for a in big)
    assert len(set(big)) > 0.6 * int(mask.sum())


# --- heuristic ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "scenario,distress,worst",
    [
        ("couple", [0.2, 0.9], 1),
        ("couple", [0.8, 0.3], 0),
        ("family", [0.1, 0.3, 0.95], 2),
        ("family", [0.2, 0.85, 0.4, 0.1, 0.3], 1),
    ],
)
def test_heuristic_targets_the_worst_off_member_when_distress_is_high(scenario, distress, worst, make_state):
    enc = ActionEncoding(scenario)
    agent = HeuristicAgent(scenario, enc)
    state = make_state(scenario, distress, pattern="pursue_withdraw")
    action = agent.act(None, enc.mask(len(distress)), state)
    decision = enc.decode(action)
    assert decision.intervene, "high distress: the heuristic speaks"
    assert enc.target_slots(decision.target, len(distress)) == (worst,)
    # its ranking agrees: the worst-off member's target option comes first
    r = agent.rank(state, enc)
    assert r.p_speak > 0.5
    assert int(np.argmax(r.target_probs)) == enc.target_for_slots([worst], len(distress))
    assert r.top_targets(enc, state.members, k=1) == [[state.members[worst]]]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_heuristic_stays_quiet_when_calm_and_speaks_less_right_after_speaking(scenario, make_state):
    enc = ActionEncoding(scenario)
    n = 2 if scenario == "couple" else 3
    mask = enc.mask(n)
    agent = HeuristicAgent(scenario, enc)
    calm = make_state(scenario, [0.1] * n, pattern="repair_softening")
    assert agent.act(None, mask, calm) == 0
    assert agent.rank(calm, enc).p_speak < 0.5

    # moderately high distress (above the speak threshold, below severe)
    moderate = make_state(scenario, [0.6] + [0.2] * (n - 1), pattern="pursue_withdraw")
    agent.reset()
    assert agent.act(None, mask, moderate) != 0
    assert agent.act(None, mask, moderate) == 0, "just spoke: leaves room for the clients"
    assert agent.act(None, mask, moderate) != 0, "listened once: speaks again"
    agent.reset()
    assert agent.act(None, mask, moderate) != 0, "reset clears the memory of having spoken"
    # the ranking reads the same rule off the state's last speaker
    after_client = make_state(scenario, [0.6] + [0.2] * (n - 1), pattern="pursue_withdraw", last_speaker="M1")
    after_therapist = make_state(scenario, [0.6] + [0.2] * (n - 1), pattern="pursue_withdraw", last_speaker="Therapist")
    assert agent.rank(after_therapist, enc).p_speak < agent.rank(after_client, enc).p_speak

    # severe distress overrides the pause
    severe = make_state(scenario, [0.9] + [0.2] * (n - 1), pattern="pursue_withdraw")
    agent.reset()
    assert agent.act(None, mask, severe) != 0 and agent.act(None, mask, severe) != 0


def test_heuristic_strategy_follows_the_pattern(make_state):
    enc = ActionEncoding("couple")
    agent = HeuristicAgent("couple", enc)
    mask = enc.mask(2)
    severe_attack = make_state("couple", [0.9, 0.4], pattern="attack_attack")
    assert enc.strategy_names[enc.decode(agent.act(None, mask, severe_attack)).strategy] == "safeguard"
    agent.reset()
    severe_pw = make_state("couple", [0.9, 0.4], pattern="pursue_withdraw")
    assert enc.strategy_names[enc.decode(agent.act(None, mask, severe_pw)).strategy] in ("track", "evoke")
    # a sidelined distressed member is counterbalanced, not the worst-off
    fam = ActionEncoding("family")
    fa = HeuristicAgent("family", fam)
    side = make_state("family", [0.9, 0.5, 0.1], pattern="pursue_withdraw", untended=[0, 8, 0])
    d = fam.decode(fa.act(None, fam.mask(3), side))
    assert d.intervene and fam.target_slots(d.target, 3) == (1,)
    assert fam.strategy_names[d.strategy] == "counterbalance"


def test_heuristic_needs_the_state():
    agent = HeuristicAgent("couple")
    with pytest.raises(ValueError, match="state"):
        agent.act(None, ActionEncoding("couple").mask(2), None)


# --- make_agent -----------------------------------------------------------------------------


def test_make_agent_unknown_name_names_the_choices():
    with pytest.raises(ValueError) as e:
        make_agent("oracle", "couple")
    msg = str(e.value)
    assert "oracle" in msg
    for name in ("never", "random", "heuristic", "imitation", "ppo", "maskable_ppo"):
        assert name in msg
    assert set(AGENT_NAMES) >= {"never", "random", "heuristic", "imitation", "ppo", "maskable_ppo"}


@pytest.mark.parametrize("name", ["ppo", "maskable_ppo", "policy"])
def test_sb3_agents_without_a_policy_file_error_clearly(name):
    with pytest.raises(ValueError, match="policy"):
        make_agent(name, "couple")
    with pytest.raises(ValueError, match=r"\.zip"):
        make_agent(name, "family", policy="")


def test_sb3_agent_with_a_missing_file_or_another_scenario_errors(tmp_path, sb3_policies):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        make_agent("maskable_ppo", "couple", policy=str(tmp_path / "nope.zip"))
    with pytest.raises(ValueError, match="couple policy.*family"):
        make_agent("maskable_ppo", "family", policy=str(sb3_policies[("maskable_ppo", "couple")]))


def test_make_agent_names_and_settings(seeds, sb3_policies):
    for name in ("never", "random", "heuristic", "imitation"):
        assert make_agent(name, "couple", seed=0, imitation_data=seeds).name == name
    trained = make_agent("policy", "couple", policy=str(sb3_policies[("ppo", "couple")]))
    assert trained.name == "policy" and not trained.maskable  # guessed as PPO from the file
    masked = make_agent("policy", "couple", policy=str(sb3_policies[("maskable_ppo", "couple")]))
    assert masked.maskable
    # the learned agent's old name in rollout is still accepted, with a deprecation message
    with pytest.warns(FutureWarning, match="now called 'policy'"):
        old = make_agent("trained", "couple", policy=str(sb3_policies[("maskable_ppo", "couple")]))
    assert old.name == "policy" and old.maskable
    h = make_agent("heuristic", "family", speak_threshold=0.9)
    assert h.speak_threshold == 0.9
