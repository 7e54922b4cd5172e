"""The group an env plays is the seed's whole group (issue 16): the second real slice's
"couple" of three (Lorena, Aryn, Josh) is either played with all three or refused by name at
construction, never cut to two. Skipped without ``../shared``."""

from __future__ import annotations

import pytest

from rescue_env.data import GroupSizeError
from rescue_env.envs.gym_env import GroupSupportEnv


@pytest.mark.xfail(
    strict=True,
    reason="GroupSupportEnv does not call rescue_env.data.check_group_sizes(env.dialogues, env.encoding.max_members) "
    "at construction yet: rescue_env.core.StartTable cuts participants to max_members (the env core refactor, issue 11)",
)
def test_the_env_never_drops_a_member(real_more_path, three_partner_couple):
    try:
        env = GroupSupportEnv("couple", data_path=str(real_more_path))
    except GroupSizeError as e:
        assert three_partner_couple.sample_id in str(e) and "env.max_members=3" in str(e)
        return
    env.reset(seed=0, options={"dialogue": three_partner_couple.sample_id})
    assert env.session.members == tuple(three_partner_couple.participants)


@pytest.mark.xfail(
    strict=True,
    raises=ValueError,
    reason="couples take env.max_members=2 only until the env core takes 2-3 partners (issue 11)",
)
def test_three_partner_couple_plays_with_all_three(real_more_path, three_partner_couple):
    env = GroupSupportEnv("couple", data_path=str(real_more_path), max_members=3, record_transcript=True)
    obs, info = env.reset(seed=0, options={"dialogue": three_partner_couple.sample_id, "start_row": 4})
    assert env.session.members == ("Lorena", "Aryn", "Josh")
    assert obs["present"].tolist() == [1.0, 1.0, 1.0] and obs["distress"].shape == (3,)
    assert info["state"].n == 3 and info["action_mask"].all()  # the group fills the cap: every target valid
    # Josh alone can be addressed, and the state follows all three through the episode
    josh = env.encoding.target_for_slots([2], 3)
    _, _, _, _, info = env.step(env.encoding.encode(josh, 0))
    assert info["state"].members == ("Lorena", "Aryn", "Josh") and info["state"].untended[2] == 0
