"""The group an env plays is the seed's whole group (issue 16): the second real slice's
"couple" of three (Lorena, Aryn, Josh) is either played with all three or refused by name at
construction, never cut to two. Skipped without ``../shared``."""

from __future__ import annotations

import pytest

from rescue_env.data import GroupSizeError
from rescue_env.envs.gym_env import GroupSupportEnv


def test_the_env_never_drops_a_member(real_more_path, three_partner_couple):
    """With the default cap of two the three-partner couple is refused by name, at construction."""
    with pytest.raises(GroupSizeError) as e:
        GroupSupportEnv("couple", data_path=str(real_more_path))
    assert three_partner_couple.sample_id in str(e.value) and "env.max_members=3" in str(e.value)


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
