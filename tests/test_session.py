"""An episode's Session view: its bookkeeping, its transcript in the benchmark schema, and the
export of an episode through the foundation's loader and ``rescue data validate``."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from rescue_env.experiments.cli import main as cli_main
from rescue_env.data import THERAPIST, Dialogue, load_dialogues, write_jsonl
from rescue_env.dynamics import TO_GROUP, TO_THERAPIST, ClientTurn
from rescue_env.envs.gym_env import GroupSupportEnv
from rescue_env.state import extract_state
from rescue_env.taxonomy.actions import ActionEncoding
from rescue_env.taxonomy.labels import UTTERANCE_TYPES, patterns, strategies

#: keys every row of the real RESCUE-BENCH records carries (shared/data/rescue-bench-subset)
BENCHMARK_ROW_KEYS = {
    "start_time", "end_time", "primary_speaker", "target", "dialogue_cleaned", "utterance_type",
    "background_dialogue", "tone_of_voice", "body_posture", "facial_expressions",
    "self_directed_behavior", "interaction_behavior", "internal_emotion", "viewpoints_attitudes",
    "support_strategy", "row_index", "relation_pattern", "relation_pattern_reason",
    "relation_pattern_evidence_rows",
}
STATE_KEYS = {"members", "distress", "intensity", "emotion", "stance", "pattern", "untended", "row_index"}


@pytest.fixture(scope="module")
def seeds() -> list[Dialogue]:
    return load_dialogues()


def _dialogue(seeds, scenario: str, index: int = 0) -> Dialogue:
    return [d for d in seeds if d.scenario == scenario][index]


class _Episode:
    """An env's episode seen through its Session; ``step`` returns what the step did."""

    def __init__(self, env: GroupSupportEnv, seed: int, dialogue: Dialogue, start_row: int):
        self.env = env
        env.reset(seed=seed, options={"dialogue": dialogue.sample_id, "start_row": start_row})

    def __getattr__(self, name):
        return getattr(self.env.session, name)

    def step(self, action: int) -> SimpleNamespace:
        move, invalid = self.env.session.move_for(action)
        obs, _, _, _, info = self.env.step(action)
        turns = [SimpleNamespace(slot=s, utterance_type=UTTERANCE_TYPES[u], addressee=a) for s, u, a in self.env.core.turns(0)]
        self.streak = round(float(obs["tempo"][1]) * 3)  # the observation's streak (capped at 3)
        self.n_interventions = self.env.episode_stats()["interventions"]
        return SimpleNamespace(rows=info.get("rows", []), move=move, invalid_action=info["invalid_action"], turns=turns)


def _session(seeds, scenario="couple", start_row=6, seed=0, record=True, index=0, **kwargs) -> _Episode:
    d = _dialogue(seeds, scenario, index)
    env = GroupSupportEnv(scenario, data_path=seeds, record_transcript=record, horizon=100, terminate_on_settle=False, **kwargs)
    return _Episode(env, seed, d, start_row)


def _play(env: GroupSupportEnv, seed: int, steps: int) -> list[dict]:
    enc = env.encoding
    _, info = env.reset(seed=seed)
    acts = [enc.encode(0, 0), 0, enc.encode(1, 3), enc.encode(enc.group_target, 1), 0]
    rows = []
    for t in range(steps):
        _, _, term, trunc, info = env.step(acts[t % len(acts)])
        rows.extend(r.to_dict() for r in info["rows"])
        if term or trunc:
            break
    return rows


# --- Session mechanics ---------------------------------------------------------------------
def test_start_row_bounds(seeds):
    d = _dialogue(seeds, "couple")
    # the mean client (heterogeneity 0): a drawn client's baseline would move the start distress
    env = GroupSupportEnv("couple", data_path=seeds, record_transcript=True, heterogeneity=0.0)
    for bad in (-1, len(d.rows) + 1):
        with pytest.raises(ValueError, match="start_row"):
            env.reset(seed=0, options={"dialogue": d.sample_id, "start_row": bad})
    env.reset(seed=0, options={"dialogue": d.sample_id, "start_row": len(d.rows)})
    assert env.session.state == extract_state(d)
    env.reset(seed=0, options={"dialogue": d.sample_id, "start_row": 0})
    assert env.session.state == extract_state(d, 0) and env.session.rows == []


def test_seed_rows_open_the_transcript(seeds):
    s = _session(seeds, start_row=9, heterogeneity=0.0)  # the mean client: no baseline moves the start
    d = s.dialogue
    assert len(s.rows) == 9
    assert s.state == extract_state(d, 9)
    for got, want in zip(s.rows, d.rows[:9]):
        assert got.dialogue_cleaned == want.dialogue_cleaned
        assert got.extras["simulated"] is False
        assert set(got.extras["state"]) == STATE_KEYS


def test_step_bookkeeping(seeds):
    s = _session(seeds)
    enc = s.encoding
    before = s.state.untended.copy()
    r = s.step(enc.encode(0, enc.strategy_index("join")))
    assert r.move.intervene and r.move.slots == (0,) and r.move.strategy_name == "join"
    assert not r.invalid_action and r.turns
    assert s.t == 1 and s.streak == 1 and s.n_interventions == 1
    assert s.state.untended[0] == 0 and s.state.untended[1] == before[1] + 1
    assert s.state.last_strategy == "join" and s.state.last_target == (s.members[0],)
    s.step(enc.encode(enc.group_target, 0))
    assert s.streak == 2 and list(s.state.untended) == [0, 0]
    s.step(0)
    assert s.streak == 0 and s.t == 3 and s.n_interventions == 2
    assert list(s.state.untended) == [1, 1]
    with pytest.raises(ValueError):
        s.step(enc.n_actions)


def test_masked_target_decodes_to_listening(seeds):
    d = min((d for d in seeds if d.scenario == "family"), key=lambda d: len(d.participants))
    enc = ActionEncoding("family")
    s = _session(seeds, "family", start_row=5, index=[x for x in seeds if x.scenario == "family"].index(d))
    move, invalid = s.move_for(enc.encode(enc.max_members - 1, 0))
    assert invalid and not move.intervene
    move, invalid = s.move_for(enc.encode(0, 0))
    assert not invalid and move.intervene and move.slots == (0,)
    move, invalid = s.move_for(enc.encode(enc.group_target, 0))
    assert move.slots == tuple(range(len(d.participants)))


def test_record_false_moves_state_without_rows(seeds):
    s = _session(seeds, record=False)
    assert s.rows == []
    d0 = s.state.distress.copy()
    for _ in range(5):
        assert s.step(0).rows == []
    assert s.rows == [] and s.t == 5
    assert not np.array_equal(d0, s.state.distress)
    with pytest.raises(RuntimeError, match="record"):
        s.to_dialogue()


# --- transcript rows in the benchmark schema ----------------------------------------------
@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_transcript_rows_in_benchmark_schema(scenario):
    env = GroupSupportEnv(scenario, record_transcript=True, horizon=20, terminate_on_settle=False)
    rows = _play(env, seed=3, steps=20)
    members = set(env.session.members)
    therapist = [r for r in rows if r["primary_speaker"] == THERAPIST]
    clients = [r for r in rows if r["primary_speaker"] != THERAPIST]
    assert therapist and clients and len(clients) >= 20  # at least one client turn per step
    index = [r["row_index"] for r in rows]
    assert index == sorted(index) and len(set(index)) == len(index)
    assert all(a["end_time"] <= b["start_time"] for a, b in zip(rows, rows[1:]))
    pats = set(patterns(scenario))
    for r in rows:
        assert BENCHMARK_ROW_KEYS <= set(r), BENCHMARK_ROW_KEYS - set(r)
        assert r["simulated"] is True and isinstance(r["step"], int)
        assert set(r["state"]) == STATE_KEYS
        assert r["state"]["members"] == list(env.session.members)
        assert isinstance(r["dialogue_cleaned"], str) and r["dialogue_cleaned"]
        assert r["start_time"] < r["end_time"]
    for r in therapist:
        assert len(r["support_strategy"]) == 1
        s = r["support_strategy"][0]
        assert s["provider"] == THERAPIST and s["strategy_type"] in strategies(scenario)
        assert s["target"] == r["target"] and r["target"]
        assert set(s) == {"provider", "target", "strategy_type", "strategy_content"}
        assert r["relation_cycle_state"] in pats or r["relation_cycle_state"] == ""
        assert "relation_cycle_reason" in r and "relation_cycle_evidence_rows" in r
        assert r["utterance_type"] == "" and r["internal_emotion"] == []
    for r in clients:
        assert r["primary_speaker"] in members
        assert r["utterance_type"] in UTTERANCE_TYPES
        assert r["support_strategy"] == []
        assert "relation_cycle_state" not in r
        assert r["relation_pattern"] in pats or r["relation_pattern"] == ""
        (emo,) = r["internal_emotion"]
        assert emo["person"] == r["primary_speaker"] and emo["emotion_description"]
        assert 1 <= emo["intensity"] <= 10
        for v in r["viewpoints_attitudes"]:
            assert set(v) == {"source", "target", "viewpoint", "attitude"}
            assert v["source"] == r["primary_speaker"] and v["target"] in members
        assert r["target"] and (set(r["target"]) <= members | {THERAPIST, env.session.dialogue.group_label})


def test_rows_reflect_the_step(seeds):
    s = _session(seeds, seed=5)
    enc = s.encoding
    for t in range(12):
        before = s.state.pattern
        res = s.step(enc.encode(1, 2) if t % 2 else 0)
        rows = res.rows
        assert rows[0].is_therapist == res.move.intervene
        if res.move.intervene:
            assert rows[0].relation_cycle_state == (before or "")
            assert rows[0].target == [s.members[1]]
        client_rows = [r for r in rows if not r.is_therapist]
        assert [r.primary_speaker for r in client_rows] == [s.members[turn.slot] for turn in res.turns]
        assert [r.utterance_type for r in client_rows] == [turn.utterance_type for turn in res.turns]
        for r in client_rows:
            assert r.relation_pattern == (s.state.pattern or "")
            assert r.extras["state"] == s.state.to_dict()


class _ScriptedBackend:
    """A client model with self-reports, as an LLM backend gives them."""

    name = "scripted"

    async def arespond(self, session, move, planned, *, pattern_before, seed, behaviours=None):
        state = session.state
        state.distress[:] = 0.3
        state.pattern = "repair_softening"
        return [
            ClientTurn(0, "repair", 1, text="I hear you.", emotion="feels hopeful", intensity=6, stances=[(1, "wants to try", "warm and open")]),
            ClientTurn(1, "disclosure", TO_GROUP, text="I was scared."),
            ClientTurn(0, "request", TO_THERAPIST, text="Can you help us?"),
        ]



def test_session_uses_a_backends_self_reports(seeds):
    s = _session(seeds, start_row=4, dynamics=_ScriptedBackend())
    rows = s.step(0).rows
    a, b = s.members
    assert [r.dialogue_cleaned for r in rows] == ["I hear you.", "I was scared.", "Can you help us?"]
    assert rows[0].target == [b] and rows[1].target == ["Couple"] and rows[2].target == [THERAPIST]
    assert rows[0].internal_emotion[0].emotion_description == "feels hopeful"
    assert rows[0].internal_emotion[0].intensity == 6
    assert [(v.source, v.target, v.viewpoint, v.attitude) for v in rows[0].viewpoints_attitudes] == [(a, b, "wants to try", "warm and open")]
    assert rows[1].viewpoints_attitudes == []  # to the group: no single stance edge
    assert all(r.relation_pattern == "repair_softening" for r in rows)
    assert s.state.last_speaker == a


# --- export ---------------------------------------------------------------------------------
@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_exported_episode_reads_back_and_validates(scenario, tmp_path, capsys):
    env = GroupSupportEnv(scenario, record_transcript=True, horizon=15, terminate_on_settle=False)
    episodes = []
    for seed in (0, 1):
        _play(env, seed=seed, steps=15)
        episodes.append(env.session.to_dialogue(sample_id=f"sim/{scenario}/{seed}", agent="test", episode=seed))
    path = write_jsonl(episodes, tmp_path / "episodes.jsonl.gz")  # the form a rollout writes
    loaded = load_dialogues(path)
    assert [d.sample_id for d in loaded] == [f"sim/{scenario}/0", f"sim/{scenario}/1"]
    for orig, back in zip(episodes, loaded):
        assert back.scenario == scenario
        assert back.participants == orig.participants
        assert len(back.rows) == len(orig.rows) > orig.extras["start_row"]
        assert back.extras["agent"] == "test" and back.extras["seed_sample_id"] == orig.extras["seed_sample_id"]
        for ro, rb in zip(orig.rows, back.rows):
            assert rb.primary_speaker == ro.primary_speaker
            assert rb.utterance_type == ro.utterance_type
            assert rb.strategy == ro.strategy
            assert rb.relation_label == ro.relation_label
            assert rb.extras["state"] == ro.extras["state"]
        # the foundation's state extraction recovers the simulated pattern at the end
        assert extract_state(back).pattern == extract_state(orig).pattern
    assert extract_state(loaded[-1]).pattern == env.session.state.pattern
    capsys.readouterr()
    assert cli_main(["data", "validate", str(path)]) == 0
    out = capsys.readouterr()
    assert "error" not in out.err.lower()


def test_exported_couple_episode_validates_strictly(tmp_path, capsys):
    env = GroupSupportEnv("couple", record_transcript=True, horizon=10, terminate_on_settle=False)
    _play(env, seed=4, steps=10)
    path = write_jsonl([env.session.to_dialogue()], tmp_path / "one.jsonl")
    assert cli_main(["data", "validate", str(path), "--strict"]) == 0
    assert load_dialogues(path, strict=True)[0].sample_id == f"sim/{env.session.dialogue.sample_id}"


def test_state_column_row_index_follows_the_transcript(seeds):
    s = _session(seeds, seed=2)
    for _ in range(4):
        rows = s.step(0).rows
    assert rows[-1].extras["state"]["row_index"] == rows[-1].row_index
    assert s.state.row_index == s.rows[-1].row_index


def test_state_column_emotion_matches_the_speakers_report(seeds):
    s = _session(seeds, seed=2)
    for _ in range(4):
        rows = s.step(0).rows
    last = rows[-1]
    state = last.extras["state"]
    speaker = s.members.index(last.primary_speaker)
    assert state["emotion"][speaker] == last.internal_emotion[0].emotion_description
    assert state["intensity"][speaker] == last.internal_emotion[0].intensity
