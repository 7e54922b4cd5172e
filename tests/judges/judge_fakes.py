"""Test doubles for the judge: fake async LLM clients and a small generated rollout folder.

The fake judge answers like a well-calibrated judge: anchors get exactly their expected
scores and every other reply the offline heuristic's scores (read from the prompt), so a
test knows what to expect. Variants drift after N calls, always prefer the first-shown
reply, add seed-dependent noise, or fail.
"""

from __future__ import annotations

import copy
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rescue_env.data import load_dialogues, write_jsonl
from rescue_env.data.schema import THERAPIST, Dialogue, StrategyRecord
from rescue_env.judges.anchors import ANCHORS
from rescue_env.judges.items import JudgeItem
from rescue_env.judges.llm_judge import ABSOLUTE_NAME, PAIRWISE_NAME, response_in
from rescue_env.judges.offline import OfflineScorer
from rescue_env.judges.rubric import DIMENSIONS, Judgement
from rescue_env.judges.twins import RESPONDER_NAME, TWIN_NAME
from rescue_env.state import iter_states


@dataclass
class Result:
    ok: bool
    data: dict[str, Any] | None = None
    error: str | None = None


_ANCHOR_BY_TEXT = {a.item.response: a for a in ANCHORS}


def _as_payload(j: Judgement, shift: int = 0) -> dict[str, Any]:
    def clip(x: float) -> int:
        return int(max(0, min(4, round(x) + shift)))

    return {
        "scores": {
            d: {
                "addressed": clip(j.dimensions[d].addressed),
                "others": None if j.dimensions[d].others is None else clip(j.dimensions[d].others),
            }
            for d in DIMENSIONS
        },
        "veto": j.veto,
        "reasons": {d: f"fake reason for {d}" for d in DIMENSIONS},
        "veto_reason": j.veto_reason,
    }


def _bare_item(text: str) -> JudgeItem:
    return JudgeItem("x", "x", "couple", ("A", "B"), ("A", "B"), [], text)


class FakeJudgeClient:
    """Async client with the ``complete_json`` interface of ``rescue_env.llm``.

    Args:
        drift_after: after this many absolute calls, every score is shifted by ``drift``.
        position_bias: ``"A"`` to always prefer the first-shown reply in pairwise calls.
        noise: per-seed random ±1 on non-anchor scores (for repeats).
        fail_texts: replies whose judgement fails (``ok=False``).
    """

    def __init__(self, *, drift_after: int | None = None, drift: int = 2, position_bias: str | None = None,
                 noise: bool = False, fail_texts: tuple[str, ...] = ()):
        self.drift_after, self.drift = drift_after, drift
        self.position_bias = position_bias
        self.noise = noise
        self.fail_texts = fail_texts
        self.calls: list[dict[str, Any]] = []
        self.absolute_calls = 0
        self.offline = OfflineScorer()

    async def complete_json(self, messages, schema, *, name, seed=None, tag=None):
        self.calls.append({"name": name, "seed": seed, "tag": tag, "messages": messages, "schema": schema})
        return self.answer(messages, name, seed)

    def server_responder(self):
        """A ``MockLLMServer`` responder giving the same answers over HTTP."""

        def respond(body: dict[str, Any]) -> dict[str, Any]:
            name = body["response_format"]["json_schema"]["name"]
            self.calls.append({"name": name, "seed": body.get("seed"), "tag": None, "messages": body["messages"]})
            res = self.answer(body["messages"], name, body.get("seed"))
            return res.data if res.ok else {"error": res.error}

        return respond

    def answer(self, messages, name, seed=None) -> Result:
        if name == ABSOLUTE_NAME:
            self.absolute_calls += 1
            text = response_in(messages)
            if text is None:
                return Result(False, error="no response in prompt")
            if any(t in text for t in self.fail_texts):
                return Result(False, error="server error (fake)")
            shift = self.drift if self.drift_after is not None and self.absolute_calls > self.drift_after else 0
            anchor = _ANCHOR_BY_TEXT.get(text)
            if anchor is not None:
                return Result(True, _as_payload(anchor.expected, shift))
            if self.noise:
                shift += random.Random(f"{seed}|{text}").choice([-1, 0, 1])
            return Result(True, _as_payload(self.offline.judge(_bare_item(text)), shift))
        if name == PAIRWISE_NAME:
            body = messages[-1]["content"]
            a = re.search(r"<response_a>\n(.*?)\n</response_a>", body, re.S).group(1)
            b = re.search(r"<response_b>\n(.*?)\n</response_b>", body, re.S).group(1)
            if self.position_bias:
                w = self.position_bias
            else:
                sa = self.offline.judge(_bare_item(a)).overall
                sb = self.offline.judge(_bare_item(b)).overall
                w = "A" if sa > sb else "B" if sb > sa else "tie"
            return Result(True, {"winner": w, "dimensions": {d: w for d in DIMENSIONS}, "reason": "fake"})
        if name == TWIN_NAME:
            return Result(True, {"event_twin": "My brother borrowed the car and crashed it. I feel so alone in this.",
                                 "emotion_twin": "The same thing happened with the budget, and honestly I feel ashamed.",
                                 "new_emotion": "feels ashamed"})
        if name == RESPONDER_NAME:
            return Result(True, {"utterance": "I hear you. That sounds really hard."})
        return Result(False, error=f"unknown schema name {name}")


def make_fake_client(llm_cfg: dict[str, Any]) -> FakeJudgeClient:
    """``client_factory`` target for the Hydra app."""
    return FakeJudgeClient()


# --------------------------------------------------------------------------------------------
# a small rollout folder

POOR = "I understand, that sounds hard. You should just talk to each other more."
DEMEANING = "Honestly, that's a pathetic excuse and you're being lazy."


def _with_state(d: Dialogue) -> Dialogue:
    for row, st in zip(d.rows, iter_states(d)):
        row.extras["state"] = st.to_dict()
    return d


def make_episodes(seeds: list[Dialogue], agents=("heuristic", "poor", "never"), episodes: int = 2,
                  prefix: int = 3) -> list[Dialogue]:
    """Episodes in the rollout format built from seed dialogues.

    The first ``prefix`` rows are the seed history shared by every agent (``start_row``, as
    when episodes grow from the same seed); after them ``heuristic`` keeps the seed's therapist replies, ``poor`` replaces them
    with a generic advice reply (its first reply in episode 1 demeans: a veto), and
    ``never`` has no therapist rows.
    """
    out = []
    for seed in seeds:
        for agent in agents:
            for ep in range(episodes):
                d = copy.deepcopy(seed)
                rows = []
                poor_first = True
                for k, row in enumerate(d.rows):
                    if k >= prefix and row.primary_speaker == THERAPIST:
                        if agent == "never":
                            continue
                        if agent == "poor":
                            row.dialogue_cleaned = DEMEANING if (ep == 1 and poor_first) else POOR
                            poor_first = False
                            row.support_strategy = [StrategyRecord(THERAPIST, list(row.target), "goal_align", "advice")]
                    rows.append(row)
                for i, row in enumerate(rows, start=1):
                    row.row_index = i
                    row.relation_pattern_evidence_rows = []
                    row.relation_cycle_evidence_rows = [] if row.relation_cycle_evidence_rows is not None else None
                d.rows = rows
                d.sample_id = f"{agent}/{seed.sample_id}/ep{ep}"
                d.extras.update(agent=agent, episode=ep, seed_sample_id=seed.sample_id, start_row=prefix,
                                sigma_return=-1.0 - 0.1 * ep, failed=False)
                out.append(_with_state(d))
    return out


def write_rollout(folder: Path, n_seeds: int = 2, episodes: int = 2, *, compress: bool = True) -> Path:
    """Write the episodes file (``episodes.jsonl.gz`` as a rollout does; ``compress=False``:
    the plain ``episodes.jsonl`` of an older folder) and a minimal ``report.html`` into ``folder``."""
    from rescue_env.rollout import episodes_file

    seeds = load_dialogues()[:n_seeds]
    folder.mkdir(parents=True, exist_ok=True)
    write_jsonl(make_episodes(seeds, episodes=episodes), episodes_file(folder, compress=compress))
    (folder / "report.html").write_text(
        "<!doctype html><html><head><title>run</title></head><body><h1>Rollout</h1>\n<!-- judge -->\n"
        "<p>footer</p></body></html>\n", encoding="utf-8")
    return folder
