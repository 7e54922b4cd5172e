"""Group sizes against what an environment holds: a member is never dropped silently.

The release labels a session by the *kind* of relationship, not by head count: a
``"couple"`` session may have three partners (``aryn_josh_and_lorena/…`` in the public
release). An environment is built for at most ``max_members`` members per scenario
(``env.max_members``; :data:`~rescue_env.taxonomy.actions.DEFAULT_MAX_MEMBERS` when unset).
A seed dialogue with more members than that cannot be played without leaving someone out —
possibly the worst-off member — so it is an error that names the sample, its size and the
setting to change, never a truncation:

>>> from rescue_env.data import load_dialogues, check_group_sizes
>>> dialogues = load_dialogues("benchmark_more.jsonl")
>>> check_group_sizes(dialogues, max_members=None)   # doctest: +SKIP
GroupSizeError: benchmark_more.jsonl:2: participants: couple sample 'aryn_josh_and_lorena/…'
has 3 members (Lorena, Aryn, Josh) but the couple env holds at most 2 (set env.max_members=3 …)

:func:`check_group_sizes` is what every consumer that plays seed dialogues calls before it
builds an env (``rescue rollout``, ``rescue train``, agent predictors of ``rescue
eval-tasks``); :func:`oversized_groups` is the non-raising form (``rescue data validate``
and ``rescue calibrate`` report it). Fitting (``rescue calibrate``, the imitation agent) and
state extraction use every member and need no cap.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rescue_env.data.errors import DataValidationError, Problem, Severity
from rescue_env.data.schema import Dialogue

#: ``max_members`` as given to :func:`check_group_sizes`: one cap for every scenario (the
#: env's ``max_members`` argument; ``None`` = each scenario's default) or one per scenario.
MaxMembers = int | None | Mapping[str, int | None]


class GroupSizeError(DataValidationError):
    """A seed dialogue has more members than the env built for its scenario holds.

    ``problems`` has one :class:`Problem` per oversized dialogue (file and line of the
    record, ``field="participants"``); ``str(error)`` is one line per dialogue, naming the
    sample id, its members and the setting to change (``env.max_members``).
    """


def group_cap(scenario: str, max_members: MaxMembers = None) -> int:
    """The largest group an env of ``scenario`` holds with ``max_members`` (see :data:`MaxMembers`)."""
    from rescue_env.taxonomy.actions import DEFAULT_MAX_MEMBERS  # imports rescue_env.data: no cycle at load

    cap = max_members.get(scenario) if isinstance(max_members, Mapping) else max_members
    return DEFAULT_MAX_MEMBERS[scenario] if cap is None else int(cap)


def oversized_groups(dialogues: Iterable[Dialogue], max_members: MaxMembers = None, *, remedy: str | None = None) -> list[Problem]:
    """One error :class:`Problem` per dialogue whose group exceeds its scenario's cap, in order.

    The message names the sample id, the scenario, the members and the cap; the expected
    part says what to change (``remedy``; by default: raise ``env.max_members`` or leave the
    sample out). An empty list means every group fits.
    """
    return [
        _problem(d, cap, remedy or f"set env.max_members={len(d.participants)} or more, or leave the sample out of data.path; members are never dropped")
        for d, cap in _oversized(dialogues, max_members)
    ]


def check_group_sizes(dialogues: Iterable[Dialogue], max_members: MaxMembers = None, *, remedy: str | None = None) -> None:
    """Raise :class:`GroupSizeError` when a dialogue has more members than an env of its
    scenario holds with ``max_members`` (an int or ``None`` as an env's ``max_members``
    argument, or a ``{scenario: cap}`` mapping). Call it on the seed dialogues before
    building an env on them; it never modifies them. ``remedy`` replaces the default advice
    (raise ``env.max_members``) where another setting governs the cap."""
    problems = oversized_groups(dialogues, max_members, remedy=remedy)
    if problems:
        raise GroupSizeError(problems)


def group_size_warnings(dialogues: Iterable[Dialogue]) -> list[Problem]:
    """Warnings for ``rescue data validate``: each group larger than its scenario's default
    env, with what each consumer will do with it. Whether a group fits depends on the env,
    not on the data, so these stay warnings under ``--strict``."""
    return [
        _problem(
            d,
            cap,
            f"rollout, train and agent eval-tasks stop on it with this message unless env.max_members>={len(d.participants)}; "
            f"calibrate, the imitation agent, state extraction and the six tasks' instances use all {len(d.participants)} members",
            "warning",
        )
        for d, cap in _oversized(dialogues, None)
    ]


def _oversized(dialogues: Iterable[Dialogue], max_members: MaxMembers) -> list[tuple[Dialogue, int]]:
    out = []
    for d in dialogues:
        cap = group_cap(d.scenario, max_members)
        if len(d.participants) > cap:
            out.append((d, cap))
    return out


def _problem(d: Dialogue, cap: int, expected: str, severity: Severity = "error") -> Problem:
    file, line = d.origin
    message = (
        f"{d.scenario} sample {d.sample_id!r} has {len(d.participants)} members ({', '.join(d.participants)}) "
        f"but the {d.scenario} env holds at most {cap} (env.max_members={cap})"
    )
    return Problem(file or "<memory>", line, "participants", message, expected, severity)


# ---------------------------------------------------------------------------------------------
# sessions of one group


def group_id(dialogue: Dialogue) -> str:
    """The couple or family a dialogue is a session of, from the dialogue alone: its sample
    id's first part and its participants (RESCUE-BENCH files several sessions of one couple
    under one prefix; the bundled seeds share a prefix but not their people). Sessions of one
    family with members who come and go are linked only by :func:`session_groups`."""
    return f"{dialogue.sample_id.split('/')[0]}:{'+'.join(sorted(dialogue.participants))}"


def session_groups(dialogues: Iterable[Dialogue]) -> dict[str, str]:
    """``sample_id -> group``: the couple or family each dialogue is a session of. Two
    dialogues are sessions of one group when their sample ids share the first part and they
    share at least two participants (case-folded; all of them in a group of one or two): the
    release files all families under ``family_therapy/`` and a family brings different members
    to different sessions (Maria and Joel come with Laura, with Nick, with Laura and Josh).
    Linked sessions form one group (connected components); its name is the smallest
    :func:`group_id` among them. Cross-validation holds out whole groups; the population fit
    treats a person seen in several sessions of a group as one client (:func:`client_id`)."""
    ds = list(dialogues)
    parent = list(range(len(ds)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    people = [{p.casefold() for p in d.participants} for d in ds]
    for a in range(len(ds)):
        for b in range(a):
            if ds[a].sample_id.split("/")[0] == ds[b].sample_id.split("/")[0]:
                shared = len(people[a] & people[b])
                if shared >= min(2, len(people[a]), len(people[b])):
                    parent[root(a)] = root(b)
    names: dict[int, str] = {}
    for i, d in enumerate(ds):
        r = root(i)
        names[r] = min(names.get(r, group_id(d)), group_id(d))
    return {d.sample_id: names[root(i)] for i, d in enumerate(ds)}
