"""Clinical priors of the calibrated client model.

Where a data set is thin (it always is: a few hundred labelled transitions), every fitted
quantity is shrunk toward these priors. They encode, as numbers, the facts of DESIGN.md §1
and the clinical theory behind the taxonomy:

- **Pattern stickiness** (:data:`STAY`): pursue-withdraw is the strongest attractor of
  couple therapy (EFT); escalations hold; mixed states are transient.
- **Where patterns go when they change** (:data:`CHANGE`): from pursue-withdraw about 50 %
  of changes go to repair-softening and 7 % straight to constructive alignment; about 35 %
  of changes out of repair-softening fall back to attack-attack (the paper's transition
  figure).
- **Strategy-pattern fit** (:data:`FIT`, −1..1): how well a therapist move suits a
  pattern — EFT tracks and evokes in pursue-withdraw, Gottman's de-escalation (safeguard)
  and reframing in attack-attack, enactments and evocation to re-engage two withdrawers,
  joining and repair to consolidate softening; structural family therapy's boundary work in
  coalitions and hierarchy strain, joining and counterbalancing a sidelined member. A move
  that fits calms its target more and pulls the pattern toward constructive ones; a misfit
  (evoking soft feelings mid-escalation, advising before feelings are heard) does little or
  backfires.
"""

from __future__ import annotations

import numpy as np

from rescue_env.taxonomy.labels import patterns, strategies, label_info

#: Probability that a pattern persists over one simulator step, before strategy effects.
STAY: dict[str, float] = {
    # couple
    "pursue_withdraw": 0.82,
    "attack_attack": 0.62,
    "withdraw_withdraw": 0.68,
    "repair_softening": 0.5,
    "constructive_alignment": 0.62,
    "mixed_transition": 0.35,
    # family
    "escalation_conflict": 0.6,
    "mutual_disengagement": 0.66,
    "cross_generational_coalition": 0.7,
    "boundary_hierarchy_strain": 0.68,
    "cooperative_family_alliance": 0.62,
}
#: Stickiness of "no clear pattern" (the extra state ``None``).
STAY_NONE = 0.45

#: Distribution of the next pattern given that the pattern changes (rows need not sum to 1;
#: they are normalised over the scenario's labels, unlisted targets share a small floor).
CHANGE: dict[str, dict[str, dict[str, float]]] = {
    "couple": {
        "pursue_withdraw": {"repair_softening": 0.5, "constructive_alignment": 0.07, "attack_attack": 0.15, "withdraw_withdraw": 0.1, "mixed_transition": 0.18},
        "attack_attack": {"pursue_withdraw": 0.3, "repair_softening": 0.25, "mixed_transition": 0.25, "withdraw_withdraw": 0.15, "constructive_alignment": 0.05},
        "withdraw_withdraw": {"pursue_withdraw": 0.35, "repair_softening": 0.25, "mixed_transition": 0.2, "attack_attack": 0.1, "constructive_alignment": 0.1},
        "repair_softening": {"attack_attack": 0.35, "constructive_alignment": 0.3, "pursue_withdraw": 0.15, "mixed_transition": 0.15, "withdraw_withdraw": 0.05},
        "constructive_alignment": {"repair_softening": 0.4, "mixed_transition": 0.3, "pursue_withdraw": 0.15, "attack_attack": 0.1, "withdraw_withdraw": 0.05},
        "mixed_transition": {"repair_softening": 0.3, "pursue_withdraw": 0.25, "attack_attack": 0.2, "constructive_alignment": 0.15, "withdraw_withdraw": 0.1},
    },
    "family": {
        "escalation_conflict": {"boundary_hierarchy_strain": 0.25, "pursue_withdraw": 0.2, "repair_softening": 0.2, "mixed_transition": 0.2, "cross_generational_coalition": 0.1, "mutual_disengagement": 0.05},
        "pursue_withdraw": {"repair_softening": 0.4, "escalation_conflict": 0.15, "mutual_disengagement": 0.15, "mixed_transition": 0.2, "cooperative_family_alliance": 0.1},
        "mutual_disengagement": {"pursue_withdraw": 0.3, "repair_softening": 0.25, "mixed_transition": 0.2, "cross_generational_coalition": 0.1, "cooperative_family_alliance": 0.15},
        "cross_generational_coalition": {"boundary_hierarchy_strain": 0.3, "escalation_conflict": 0.2, "repair_softening": 0.2, "mixed_transition": 0.2, "cooperative_family_alliance": 0.1},
        "boundary_hierarchy_strain": {"repair_softening": 0.3, "escalation_conflict": 0.2, "cross_generational_coalition": 0.15, "mixed_transition": 0.2, "cooperative_family_alliance": 0.15},
        "repair_softening": {"cooperative_family_alliance": 0.35, "escalation_conflict": 0.3, "mixed_transition": 0.15, "pursue_withdraw": 0.1, "boundary_hierarchy_strain": 0.1},
        "cooperative_family_alliance": {"repair_softening": 0.4, "mixed_transition": 0.3, "boundary_hierarchy_strain": 0.15, "escalation_conflict": 0.15},
        "mixed_transition": {"repair_softening": 0.3, "escalation_conflict": 0.2, "boundary_hierarchy_strain": 0.15, "pursue_withdraw": 0.15, "cooperative_family_alliance": 0.2},
    },
}

#: Strategy-pattern fit in −1..1 (missing pairs are 0). ``None`` = no clear pattern.
FIT: dict[str, dict[str | None, dict[str, float]]] = {
    "couple": {
        "pursue_withdraw": {"track": 1, "evoke": 1, "enact": 0.5, "reframe": 0.5, "join": 0.5, "counterbalance": 0.5, "detach": 0.5, "goal_align": -0.5},
        "attack_attack": {"safeguard": 1, "reframe": 1, "detach": 0.5, "track": 0.5, "evoke": -0.5, "enact": -1, "goal_align": -0.5, "repair": -0.5},
        "withdraw_withdraw": {"enact": 1, "evoke": 1, "join": 0.5, "track": 0.5, "safeguard": -0.5, "detach": -0.5, "goal_align": -0.5},
        "repair_softening": {"join": 1, "repair": 1, "enact": 0.5, "evoke": 0.5, "goal_align": 0.5, "safeguard": -0.5},
        "constructive_alignment": {"goal_align": 1, "repair": 0.5, "join": 0.5, "enact": 0.5, "safeguard": -0.5},
        "mixed_transition": {"track": 1, "reframe": 0.5, "counterbalance": 0.5, "join": 0.5, "enact": -0.5},
        None: {"track": 0.5, "join": 0.5, "evoke": 0.5, "goal_align": -0.5},
    },
    "family": {
        "escalation_conflict": {"safeguard": 1, "boundary": 0.5, "reframe": 0.5, "track": 0.5, "enact": -1, "repair": -0.5},
        "pursue_withdraw": {"track": 1, "counterbalance": 0.5, "join": 0.5, "reframe": 0.5, "enact": 0.5},
        "mutual_disengagement": {"enact": 1, "join": 1, "counterbalance": 0.5, "track": 0.5, "safeguard": -0.5, "boundary": -0.5},
        "cross_generational_coalition": {"boundary": 1, "counterbalance": 1, "reframe": 0.5, "track": 0.5, "enact": -0.5},
        "boundary_hierarchy_strain": {"boundary": 1, "reframe": 0.5, "join": 0.5, "track": 0.5, "enact": -0.5},
        "repair_softening": {"repair": 1, "join": 1, "enact": 0.5, "safeguard": -0.5},
        "cooperative_family_alliance": {"enact": 1, "repair": 0.5, "join": 0.5, "safeguard": -0.5, "boundary": -0.5},
        "mixed_transition": {"track": 1, "reframe": 0.5, "counterbalance": 0.5, "join": 0.5},
        None: {"join": 1, "track": 0.5, "counterbalance": 0.5},
    },
}

#: Stance softening of the addressed member(s) per strategy (fraction of the gap to +1).
SOFTEN: dict[str, float] = {
    "repair": 0.14, "enact": 0.1, "join": 0.08, "evoke": 0.07, "counterbalance": 0.05,
    "detach": 0.06, "reframe": 0.06, "safeguard": 0.04, "track": 0.03, "goal_align": 0.04, "boundary": 0.04,
}

#: Per-step hardening of every stance toward −1 in a pattern (fraction of the gap to −1).
HARDEN: dict[str, float] = {
    "attack_attack": 0.05, "escalation_conflict": 0.05, "pursue_withdraw": 0.02, "withdraw_withdraw": 0.015,
    "mutual_disengagement": 0.015, "cross_generational_coalition": 0.03, "boundary_hierarchy_strain": 0.02,
    "repair_softening": -0.02, "constructive_alignment": -0.04, "cooperative_family_alliance": -0.04,
}

#: Effect of a client's utterance on the member it addresses: (distress change, stance change
#: of the addressee toward the speaker). Accusations wound and harden; repair and validation soothe.
UTTERANCE_EFFECT: dict[str, tuple[float, float]] = {
    "accusation": (0.05, -0.1),
    "defense": (0.02, -0.05),
    "withdrawal": (0.03, -0.04),
    "request": (0.0, 0.0),
    "disclosure": (-0.01, 0.03),
    "recollection": (0.0, 0.0),
    "reflection": (-0.01, 0.02),
    "validation": (-0.04, 0.08),
    "repair": (-0.05, 0.1),
    "other": (0.0, 0.0),
}

#: Utterance types that a pattern makes more likely (multiplier on the prior weight).
UTTERANCE_TILT: dict[str, dict[str, float]] = {
    "attack_attack": {"accusation": 3, "defense": 3},
    "escalation_conflict": {"accusation": 3, "defense": 3},
    "pursue_withdraw": {"request": 2, "accusation": 1.5, "withdrawal": 2.5, "defense": 1.5},
    "withdraw_withdraw": {"withdrawal": 3, "other": 1.5},
    "mutual_disengagement": {"withdrawal": 3, "other": 1.5},
    "repair_softening": {"repair": 3, "validation": 2, "disclosure": 1.5},
    "constructive_alignment": {"validation": 3, "reflection": 2, "repair": 1.5},
    "cooperative_family_alliance": {"validation": 3, "reflection": 2, "repair": 1.5},
    "cross_generational_coalition": {"accusation": 2, "defense": 1.5},
    "boundary_hierarchy_strain": {"defense": 2, "request": 1.5, "accusation": 1.5},
}


def pattern_states(scenario: str) -> list[str | None]:
    """The pattern states of a scenario: its labels then ``None`` (no clear pattern)."""
    return [*patterns(scenario), None]


def fit_matrix(scenario: str) -> np.ndarray:
    """``[P+1, S]`` strategy-pattern fit."""
    states = pattern_states(scenario)
    strats = strategies(scenario)
    out = np.zeros((len(states), len(strats)))
    for i, p in enumerate(states):
        for s, name in enumerate(strats):
            out[i, s] = FIT[scenario].get(p, {}).get(name, 0.0)
    return out


def pattern_valence(scenario: str) -> np.ndarray:
    """``[P+1]`` valence of each pattern state (0 for no clear pattern)."""
    vals = {li.name: li.valence for li in label_info(scenario, "pattern")}
    return np.array([vals.get(p, 0.0) if p else 0.0 for p in pattern_states(scenario)])


def transition_prior(scenario: str, tilt: float = 1.2) -> np.ndarray:
    """``[S+1, P+1, P+1]`` prior transition matrices: index 0 = no intervention, ``1+s`` =
    strategy ``s``. A fitting strategy tilts the next-pattern distribution toward patterns
    of higher valence (``exp(tilt · fit · valence)``) and loosens a negative pattern's hold."""
    states = pattern_states(scenario)
    n = len(states)
    strats = strategies(scenario)
    base = np.zeros((n, n))
    for i, p in enumerate(states):
        stay = STAY.get(p, 0.5) if p else STAY_NONE
        change = CHANGE[scenario].get(p, {}) if p else {}
        row = np.full(n, 0.02)
        for j, q in enumerate(states):
            if q in change:
                row[j] = change[q] + 0.02
        if p is None:
            row[:] = 1.0
        row[i] = 0.0
        row = row / row.sum() * (1 - stay)
        row[i] = stay
        base[i] = row
    fit = fit_matrix(scenario)
    val = pattern_valence(scenario)
    out = np.zeros((len(strats) + 1, n, n))
    out[0] = base
    for s in range(len(strats)):
        for i in range(n):
            w = base[i] * np.exp(tilt * fit[i, s] * val)
            out[s + 1, i] = w / w.sum()
    return out


def effect_prior(scenario: str) -> np.ndarray:
    """``[P+1, S]`` expected change of a targeted member's distress per step: fitting moves
    calm (about −0.12), neutral ones a little (−0.05), misfits backfire (+0.02)."""
    return -0.05 - 0.07 * fit_matrix(scenario)


def utterance_prior(scenario: str) -> np.ndarray:
    """``[P+1, U]`` prior weights of client utterance types per pattern state."""
    from rescue_env.taxonomy.labels import UTTERANCE_TYPES

    states = pattern_states(scenario)
    out = np.ones((len(states), len(UTTERANCE_TYPES)))
    for i, p in enumerate(states):
        for u, name in enumerate(UTTERANCE_TYPES):
            out[i, u] *= UTTERANCE_TILT.get(p or "", {}).get(name, 1.0)
    return out / out.sum(axis=1, keepdims=True)
