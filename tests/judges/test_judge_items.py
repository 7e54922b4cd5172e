"""What gets judged: the agent's own replies, in their moment; pairs at the same moment."""

from __future__ import annotations

from judge_fakes import DEMEANING, POOR, make_episodes

from rescue_env.data import load_dialogues
from rescue_env.judges.items import items_from_dialogue, pair_moments


def test_seed_history_is_context_not_judged() -> None:
    seed = load_dialogues()[0]
    ep = make_episodes([seed], agents=("poor",), episodes=1, prefix=3)[0]
    own = items_from_dialogue(ep)
    assert own and all(i.position >= 3 for i in own) and all(i.response == POOR for i in own)
    with_history = items_from_dialogue(ep, include_history=True)
    assert len(with_history) > len(own) and with_history[0].position < 3
    # real dialogues have no history: every therapist row is an item
    assert len(items_from_dialogue(seed)) == sum(1 for r in seed.rows if r.is_therapist and r.dialogue_cleaned)


def test_item_carries_its_moment() -> None:
    item = items_from_dialogue(load_dialogues()[0])[2]
    assert item.context and item.response
    assert set(item.addressed) <= set(item.members) and item.addressed
    assert item.trigger is not None and item.trigger.speaker in item.members
    assert set(item.distress) == set(item.members) and all(0 <= d <= 1 for d in item.distress.values())
    assert item.item_id == f"{item.sample_id}#r{item.row_index}"


def test_pairs_are_the_first_replies_after_the_shared_prefix() -> None:
    eps = make_episodes(load_dialogues()[:1], episodes=2)
    pairs = pair_moments(eps, "heuristic", "poor")
    assert len(pairs) == 2 and all(p.exact for p in pairs)
    for p in pairs:
        assert p.a.position == p.b.position and [t.text for t in p.a.context] == [t.text for t in p.b.context]
        assert p.b.response in (POOR, DEMEANING) and p.a.response not in (POOR, DEMEANING)
    assert pair_moments(eps, "heuristic", "never") == []  # never-intervene has nothing to compare
