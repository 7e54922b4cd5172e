"""Audit of simulated transcript text: does each line fit its speaker and its group?

Generates ``--episodes`` recorded episodes (a random masked therapist, ``--horizon`` steps,
no early settling) per data set and scenario and prints, over the simulated rows:

- ``repeat_ep``: share of episodes in which a spoken line (client or therapist) occurs twice
  verbatim;
- ``kin_mis``: share of client rows whose words or feelings contradict the speaker or the
  addressee (a child's "my son", "my husband" about a wife, "Mum," to someone who is not
  the mother, "his son" in a son's feelings, a reflexive of the wrong gender);
- ``pron_mis``: share of two-person-couple client rows whose third-person pronouns are all of
  the gender the partner is not (a heuristic: "she" may be someone else's mother);
- ``foreign``: share of spoken rows that name someone who is neither in the group nor named
  anywhere in the seed dialogue;
- ``stock``: share of spoken rows whose text (names blanked) is not a line of the data set.

The checks are written here, apart from the library's filter, and use a hand-labelled cast
(:data:`CAST`, role and gender per person of the three data sets, from reading the
dialogues; the genders of some names rest on the annotations' pronouns) instead of the
library's derived one. What they share with the filter is the idea of each rule, not code;
the name list for ``foreign`` is built the same way in spirit (participants, annotated
mentions, capitalised words), so a name that both miss is missed here too.

It runs against any version of the package (it uses only the env and the loader), so the
same command audits the code before and after a change::

    python scripts/text_audit.py --episodes 200 --horizon 30
    PYTHONPATH=/path/to/old/checkout python scripts/text_audit.py --episodes 200 --horizon 30
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from dataclasses import dataclass

import numpy as np

from rescue_env.data.loader import load_dialogues, resolve_data_path
from rescue_env.envs.gym_env import GroupSupportEnv

DATA_SETS = {
    "bundled": None,
    "subset": "/work/shared/data/rescue-bench-subset",
    "more": "/work/shared/data/rescue-bench-more",
}

#: name -> (role, gender), labelled by hand; "?" = not known
CAST: dict[str, tuple[str, str]] = {
    # bundled couples
    "Priya": ("partner", "F"), "Marcus": ("partner", "M"), "Hannah": ("partner", "F"), "Tomas": ("partner", "M"),
    "Jordan": ("partner", "M"), "Mei": ("partner", "F"), "Ruth": ("partner", "F"), "Gabriel": ("partner", "M"),
    "Dana": ("partner", "F"), "Luis": ("partner", "M"), "Amara": ("partner", "F"), "Theo": ("partner", "M"),
    # bundled families
    "Helen": ("parent", "F"), "Joan": ("parent", "F"), "Kieran": ("child", "M"),
    "Farid": ("parent", "M"), "Claire": ("parent", "F"), "Yasmin": ("child", "F"), "Oliver": ("child", "M"),
    "Ray": ("parent", "M"), "Linda": ("parent", "F"), "Daniel": ("child", "M"), "Megan": ("child", "F"), "Tom": ("child", "M"),
    # rescue-bench-subset
    "Alan": ("partner", "M"), "Evelyn": ("partner", "F"), "Casimar": ("partner", "M"), "Alexes": ("partner", "?"),
    "Maria": ("parent", "F"), "Joel": ("child", "M"), "Laura": ("child", "F"),
    # rescue-bench-more
    "Alison": ("partner", "F"), "Rod": ("partner", "M"), "Lorena": ("partner", "F"), "Aryn": ("partner", "?"),
    "Josh": ("partner", "M"), "Jessica": ("partner", "F"), "Boris": ("partner", "M"), "Brock": ("partner", "M"),
    "Kristi": ("partner", "F"), "Cyn": ("partner", "F"), "Yaya": ("partner", "F"),
}

_CHILD_WORDS = r"(?:son|daughter|kids?|child|children|stepson|stepdaughter)"
MY_CHILD = re.compile(rf"\bmy (?:own )?{_CHILD_WORDS}\b", re.I)
MY_SPOUSE = re.compile(r"\bmy (husband|boyfriend|wife|girlfriend)\b", re.I)
CALL_PARENT = re.compile(r"^\W*(mum|mom|mummy|mommy|dad|daddy)\b\s*[,.!?]", re.I)
FEEL_KIN = re.compile(rf"\b(his|her) (?:own )?({_CHILD_WORDS}|husband|wife)\b", re.I)
FEEL_SELF = re.compile(r"\b(himself|herself)\b", re.I)
HE = re.compile(r"\b(?:he|him|his|himself)\b", re.I)
SHE = re.compile(r"\b(?:she|her|herself)\b", re.I)
WORD = re.compile(r"[A-Za-z][a-z'\-]+")
#: capitalised words that name nobody (a first audit run counted "Friday" and "Mum" as names)
NOT_NAMES = frozenset(
    "monday tuesday wednesday thursday friday saturday sunday january february march april may june july august "
    "september october november december christmas easter mum mom dad mummy mommy daddy nan gran god okay ok i".split()
)


@dataclass
class Tally:
    episodes: int = 0
    repeat_episodes: int = 0
    client_rows: int = 0
    kin: int = 0
    couple_rows: int = 0
    pronoun: int = 0
    spoken: int = 0
    foreign: int = 0
    stock: int = 0


def _gender_of(word: str) -> str:
    return "M" if word.lower() in ("husband", "boyfriend", "his", "himself") else "F"


def kin_mismatch(text: str, feeling: str, speaker: str, addressee: str | None) -> bool:
    """The audit's own kinship check of one client row (see the module docstring)."""
    role, gender = CAST.get(speaker, ("?", "?"))
    if role == "child" and (MY_CHILD.search(text) or MY_SPOUSE.search(text)):
        return True
    m = CALL_PARENT.match(text)
    if m:
        want = "F" if m.group(1).lower().startswith("m") else "M"
        to_role, to_gender = CAST.get(addressee or "", ("?", "?"))
        if addressee is None or to_role != "parent" or to_gender not in (want, "?") or role == "partner":
            return True
    for m in FEEL_KIN.finditer(feeling):
        if role == "child" or _gender_of(m.group(1)) not in (gender, "?") and gender != "?":
            return True
    for m in FEEL_SELF.finditer(feeling):
        if gender != "?" and _gender_of(m.group(1)) != gender:
            return True
    return False


def spouse_or_pronoun_mismatch(text: str, speaker: str, members: list[str]) -> tuple[bool, bool]:
    """(spouse word of the wrong gender, third-person pronouns of the wrong gender) for a
    client row of a two-person couple: both point at the partner."""
    if len(members) != 2 or speaker not in members:
        return False, False
    partner = members[1 - members.index(speaker)]
    pg = CAST.get(partner, ("?", "?"))[1]
    if pg == "?":
        return False, False
    spouse = any(_gender_of(m.group(1)) != pg for m in MY_SPOUSE.finditer(text))
    he, she = bool(HE.search(text)), bool(SHE.search(text))
    pronoun = he != she and (("M" if he else "F") != pg)
    return spouse, pronoun


def audit(name: str, path: str | None, scenario: str, episodes: int, horizon: int, seed: int, show: bool = False) -> Tally | None:
    dialogues = [d for d in load_dialogues(resolve_data_path(path)) if d.scenario == scenario]
    if not dialogues:
        return None
    everyone = {n for d in load_dialogues(resolve_data_path(path)) for n in (*d.participants, *d.mentioned)} | set(CAST)
    lower_words = {w.lower() for d in dialogues for r in d.rows for w in WORD.findall(r.dialogue_cleaned or "") if w[0].islower()}
    name_re = re.compile(r"\b(" + "|".join(sorted(map(re.escape, everyone), key=len, reverse=True)) + r")\b")

    def blank(text: str) -> str:
        return re.sub(r"\s+", " ", name_re.sub("@", text)).strip().lower()

    corpus = {blank(r.dialogue_cleaned) for d in dialogues for r in d.rows if r.dialogue_cleaned}
    # the three-partner couple of rescue-bench-more needs a couple env of three
    cap = max(len(d.participants) for d in dialogues) if scenario == "couple" else None
    env = GroupSupportEnv(scenario, horizon=horizon, record_transcript=True, terminate_on_settle=False, data_path=path, max_members=cap)
    rng = np.random.default_rng(seed)
    t = Tally()
    for ep in range(episodes):
        obs, info = env.reset(seed=seed + ep)
        done = False
        while not done:
            action = int(rng.choice(np.flatnonzero(info["action_mask"])))
            obs, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
        session = env.unwrapped.session
        members = list(session.members)
        seed_text = " ".join(r.dialogue_cleaned or "" for r in session.dialogue.rows).lower()
        rows = [r for r in session.rows if r.extras.get("simulated")]
        said = Counter(r.dialogue_cleaned for r in rows)
        t.episodes += 1
        t.repeat_episodes += any(c > 1 for c in said.values())
        for r in rows:
            text = r.dialogue_cleaned or ""
            t.spoken += 1
            t.stock += blank(text) not in corpus
            names = set(name_re.findall(text))
            # capitalised mid-sentence words that the corpus never writes in lower case
            for m in WORD.finditer(text):
                if m.start() > 0 and not re.search(r"[.!?]\s*$", text[: m.start()]) and m.group(0)[0].isupper() and m.group(0).lower() not in lower_words | NOT_NAMES:
                    word = m.group(0).removesuffix("'s").rstrip("-'")
                    if word.lower() not in lower_words | NOT_NAMES and not word.startswith("I'"):
                        names.add(word)
            strangers = [n for n in names if n not in members and n.lower() not in seed_text and n not in ("I", "Therapist")]
            t.foreign += bool(strangers)
            if strangers and show:
                print(f"  foreign {strangers}: {text[:100]}")
            if r.primary_speaker == "Therapist":
                continue
            t.client_rows += 1
            addressee = r.target[0] if len(r.target) == 1 and r.target[0] in members else None
            feeling = r.internal_emotion[0].emotion_description if r.internal_emotion else ""
            spouse, pronoun = spouse_or_pronoun_mismatch(text, r.primary_speaker, members) if scenario == "couple" else (False, False)
            kin = kin_mismatch(text, feeling, r.primary_speaker, addressee) or spouse
            t.kin += kin
            if kin and show:
                print(f"  kin {r.primary_speaker}->{r.target}: {text[:80]} | {feeling}")
            if scenario == "couple" and len(members) == 2 and addressee is None:
                t.couple_rows += 1
                t.pronoun += pronoun
    return t


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--episodes", type=int, default=200)
    p.add_argument("--horizon", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", nargs="*", default=list(DATA_SETS), choices=list(DATA_SETS))
    p.add_argument("--show", action="store_true", help="print each flagged row")
    args = p.parse_args(argv)
    print(f"{'data':8} {'scenario':8} {'eps':>4} {'repeat_ep':>9} {'kin_mis':>8} {'pron_mis':>8} {'foreign':>8} {'stock':>7}")
    for name in args.data:
        for scenario in ("couple", "family"):
            t = audit(name, DATA_SETS[name], scenario, args.episodes, args.horizon, args.seed, args.show)
            if t is None:
                continue
            pct = lambda a, b: f"{100 * a / max(b, 1):.1f}%"  # noqa: E731
            print(
                f"{name:8} {scenario:8} {t.episodes:>4} {pct(t.repeat_episodes, t.episodes):>9} {pct(t.kin, t.client_rows):>8} "
                f"{pct(t.pronoun, t.couple_rows):>8} {pct(t.foreign, t.spoken):>8} {pct(t.stock, t.spoken):>7}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
