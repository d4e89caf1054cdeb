"""Topology rule: one ``kueue.x-k8s.io/podset-*-topology`` annotation set per podset (SPEC §3).

Never added when the user set any TAS annotation on the podset (or a member of its podset
group), nor to the members of a user's podset group Kueue refuses whatever they ask for (not 2
podsets, none of 1 pod, a name that is a number: :func:`~webhook.core.plan.rules.kueue_tas.refused_group`;
the finding is :mod:`webhook.core.plan.rules.kueue_tas`'s). Under ``enforce``/``warn`` a user's own
annotations must name levels of the team's Topology and may not ask for less locality than the
policy. Mode ``auto`` picks the narrowest level at which one domain of the live inventory, as Kueue's TAS sees it
(:mod:`webhook.core.kueue.inventory`), holds the whole podset.

An elastic workload (annotation ``kueue.x-k8s.io/elastic-job: "true"``) of a kind whose Kueue
webhook refuses some TAS annotations on it (:attr:`WorkloadKind.elastic_forbids`: a batch/v1 Job's
required and preferred topology) never gets those: it gets the policy's mode one step weaker when
Kueue allows that, else nothing, with a warning naming Kueue's rule; nor is it denied as asking
for less locality than a mode Kueue refuses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from webhook.core.kueue.inventory import NodeInventory
from webhook.core.kueue.kind_model import CoPlacement, WorkloadKind
from webhook.core.kueue.view import (
    GROUP_NAME,
    PREFERRED,
    REQUIRED,
    SLICE_CONSTRAINTS,
    SLICE_REQUIRED,
    SLICE_SIZE,
    UNCONSTRAINED,
    PodSet,
)
from webhook.core.objects.paths import lookup
from webhook.core.plan.draft import Draft, Plan
from webhook.core.plan.rules.auto import plan_auto, slice_rule
from webhook.core.plan.rules.capacity import constraints
from webhook.core.plan.rules.kueue_slices import (
    label_key_errors,
    layer_errors,
    order_problems,
    placed_levels,
    value_errors,
)
from webhook.core.plan.rules.kueue_tas import refused_group
from webhook.core.platform.policy import TeamPolicyCompiled, TopologyPlacement

__all__ = [
    "ELASTIC_JOB",
    "GROUP_NAME",
    "PREFERRED",
    "REQUIRED",
    "SLICE_REQUIRED",
    "SLICE_SIZE",
    "TAS_ANNOTATIONS",
    "UNCONSTRAINED",
    "check_user_topology",
    "constraints",
    "elastic_forbidden",
    "plan_topology",
    "podset_groups",
]

#: Kueue's TAS annotations on a pod template (KEP-2724, user-facing API).
TAS_ANNOTATIONS = (REQUIRED, PREFERRED, UNCONSTRAINED, SLICE_REQUIRED, SLICE_SIZE, SLICE_CONSTRAINTS)
_STRENGTH = {REQUIRED: 2, PREFERRED: 1}
#: Kueue's workload-slicing annotation (``workloadslicing.EnabledAnnotationKey``, value "true").
ELASTIC_JOB = "kueue.x-k8s.io/elastic-job"


def _user_placed(annotations: Mapping[str, Any]) -> bool:
    """Whether a podset's own annotations hold any TAS annotation (read once per podset)."""
    return any(key in annotations for key in TAS_ANNOTATIONS)


def elastic_forbidden(obj: Mapping[str, Any], row: WorkloadKind) -> tuple[str, ...]:
    """The TAS annotations Kueue's webhook refuses on ``obj``'s pod templates because ``obj`` is an
    elastic workload (``metadata.annotations["kueue.x-k8s.io/elastic-job"] == "true"``, exactly as
    Kueue's ``workloadslicing.Enabled`` compares) of a kind that forbids them; () otherwise."""
    if not row.elastic_forbids:
        return ()
    annotations = lookup(obj, ("metadata", "annotations"))
    if isinstance(annotations, Mapping) and annotations.get(ELASTIC_JOB) == "true":
        return row.elastic_forbids
    return ()


def _elastic_rule(forbidden: Sequence[str]) -> str:
    return (
        f"Kueue refuses {' and '.join(forbidden)} on an elastic workload of this kind "
        f'({ELASTIC_JOB}: "true"; Kueue\'s Job webhook: "topology is not supported with elastic jobs")'
    )


def _allowed_mode(mode: str, forbidden: Sequence[str]) -> str | None:
    """The policy's ``required``/``preferred`` mode, weakened to what Kueue allows (None: neither)."""
    if mode == "required" and REQUIRED in forbidden:
        mode = "preferred"
    if mode == "preferred" and PREFERRED in forbidden:
        return None
    return mode


def _user_request(annotations: Mapping[str, Any], levels: list[str]) -> tuple[int, int]:
    """How strongly a podset's own TAS annotations bind it: (2 required | 1 preferred | 0 other, depth)."""
    for key, strength in _STRENGTH.items():
        level = annotations.get(key)
        if level is not None:
            return strength, levels.index(level) if level in levels else -1
    return 0, -1


def check_user_topology(
    podset: PodSet,
    placement: TopologyPlacement,
    team: TeamPolicyCompiled,
    plan: Plan,
    forbidden: Sequence[str] = (),
) -> None:
    """A podset's own TAS annotations must name levels of the team's Topology (required,
    preferred, the slice level, each slice layer's), in an order Kueue's TAS places
    (:func:`~webhook.core.plan.rules.kueue_slices.order_problems`): Kueue can never admit a podset
    asking otherwise, so this is refused under ``enforce`` and warned under ``warn`` and
    ``default`` (SPEC §3, never silently stranded). Under ``enforce``/``warn`` they also may not
    ask for less locality than the policy (a weaker mode or a broader level), measured against the
    mode Kueue allows: ``forbidden`` are the TAS annotations Kueue refuses on this workload
    (:func:`elastic_forbidden`), and a policy mode Kueue refuses is weakened, never enforced.
    What Kueue's webhook refuses whatever the policy (a level that is no label key, an
    unconstrained flag that is no boolean, topology on an elastic Job) is
    :mod:`webhook.core.plan.rules.kueue_tas`'s finding, made for every team: here it only stops the
    policy's own findings on that podset."""
    annotations = podset.annotations
    if not any(key in annotations for key in TAS_ANNOTATIONS):
        return
    enforcement = placement.enforcement
    where = f"podset {podset.name!r}"
    malformed = bool(value_errors(annotations, team.kueue) or layer_errors(annotations))
    for key, level in placed_levels(annotations):
        if label_key_errors(level):
            malformed = True  # Kueue's webhook refuses it: kueue_tas says so
        elif level not in placement.levels:
            malformed = True
            message = (
                f"{key} {level!r} ({where}) is not a level of Topology {placement.topologyName!r} "
                f"for team {team.team!r}; allowed: {', '.join(placement.levels)}"
            )
            if enforcement != "enforce":
                message += "; Kueue can never admit the workload"
            plan.report("enforce" if enforcement == "enforce" else "warn", "topology", message)
    for problem in [] if malformed else order_problems(annotations, placement.levels):
        malformed = True
        message = f"{where}: {problem}" + ("; Kueue can never admit the workload" if enforcement != "enforce" else "")
        plan.report("enforce" if enforcement == "enforce" else "warn", "topology", message)
    if enforcement == "default":
        return  # under default the user's own placement is theirs, once it can be admitted
    if malformed or placement.mode not in ("required", "preferred") or placement.level is None:
        return  # malformed annotations are reported once, without a second reason
    mode = _allowed_mode(placement.mode, forbidden)
    if mode is None:
        return  # Kueue allows this workload no locality the policy could insist on
    wanted = (
        _STRENGTH[REQUIRED if mode == "required" else PREFERRED],
        placement.levels.index(placement.level),
    )
    asked = _user_request(annotations, placement.levels)
    if asked[0] < wanted[0] or (asked[0] == wanted[0] and asked[1] < wanted[1]):
        message = (
            f"{where} asks for less locality than team {team.team!r} allows: the policy is {mode} at {placement.level}"
        )
        plan.report(enforcement, "topology", message)


def podset_groups(podsets: Sequence[PodSet]) -> list[list[PodSet]]:
    """Podsets sharing a ``podset-group-name`` as one group; every other podset alone."""
    groups: dict[str, list[PodSet]] = {}
    for index, podset in enumerate(podsets):
        key = f"group:{podset.group}" if podset.group is not None else f"podset:{index}"
        groups.setdefault(key, []).append(podset)
    return list(groups.values())


def plan_topology(
    draft: Draft,
    podsets: Sequence[PodSet],
    placement: TopologyPlacement,
    inventory: NodeInventory | None,
    team: TeamPolicyCompiled,
    plan: Plan,
    forbidden: Sequence[str] = (),
    coplace: Sequence[CoPlacement] = (),
) -> None:
    """One TAS annotation set per podset; podsets sharing ``podset-group-name`` are planned as one
    (Kueue requires the members of a group to ask for the same topology). ``forbidden``: the TAS
    annotations Kueue refuses on this workload (:func:`elastic_forbidden`), never set: the
    policy's choice is weakened to what Kueue allows, else left out, with a warning.
    ``coplace``: the kind's driver and workers podsets, grouped by mode ``auto``
    (:mod:`webhook.core.plan.rules.auto`); its reasoning goes to ``plan.notes``."""
    present = [p for p in podsets if p.present]
    units = [
        members
        for members in podset_groups(present)
        # the user placed this podset (or a member of its group): never add one
        if not any(_user_placed(p.annotations) for p in members)
        # Kueue refuses podset-group-name without a required or preferred topology
        and not (placement.mode == "unconstrained" and members[0].group is not None)
        # nor a group of the user's that it refuses whatever they ask for (reported by kueue_tas)
        and not (members[0].group is not None and refused_group(members[0].group, members))
    ]
    if placement.mode == "auto":
        groups = {p.group for p in present if p.group is not None}
        chosen = plan_auto(units, present, () if forbidden else coplace, groups, placement, inventory, team)
        decided = [(members, choice.annotations) for members, choice in chosen]
        plan.notes.extend(f"topology auto: {choice.explanation}" for _, choice in chosen)
    else:
        decided = [(members, topology_annotations(members, placement)) for members in units]
    for members, wanted in decided:
        if any(key in forbidden for key in wanted):
            wanted = _elastic(members, wanted, forbidden, plan)
        for podset in members:
            for key, (value, reason) in wanted.items():
                suffix = (*podset.rule.layout.annotations, key)
                draft.set_below(podset.path, suffix, value, "topology", f"podset {podset.name!r}: {reason}")


def _elastic(
    members: list[PodSet], wanted: dict[str, tuple[str, str]], forbidden: Sequence[str], plan: Plan
) -> dict[str, tuple[str, str]]:
    """What is left of ``wanted`` once the annotations Kueue refuses on this elastic workload are
    taken out: a required level becomes preferred when Kueue allows that, else nothing is set
    (slice annotations never stand alone); a warning names Kueue's rule either way."""
    names = ", ".join(repr(p.name) for p in members)
    chosen = ", ".join(f"{key}={value}" for key, (value, _) in wanted.items())
    rule = _elastic_rule(forbidden)
    level = (wanted.get(REQUIRED) or wanted.get(PREFERRED) or (None, ""))[0]
    if level is not None and PREFERRED not in forbidden:
        plan.report("warn", "topology", f"podset {names}: {chosen} weakened to {PREFERRED}={level}: {rule}")
        return {PREFERRED: (level, f"elastic workload: preferred at {level} ({rule})")}
    plan.report(
        "warn",
        "topology",
        f"podset {names}: no topology annotation set (the policy would set {chosen}): {rule}",
    )
    return {}


def topology_annotations(members: list[PodSet], placement: TopologyPlacement) -> dict[str, tuple[str, str]]:
    """The TAS annotations of a fixed mode (``required``, ``preferred``, ``unconstrained``) for
    one podset or podset group (key → (value, reason)); mode ``auto`` is :func:`plan_auto`'s."""
    mode = placement.mode
    if mode == "unconstrained":
        return {UNCONSTRAINED: ("true", "team policy: unconstrained")}
    assert placement.level is not None
    out = {
        REQUIRED if mode == "required" else PREFERRED: (placement.level, f"team policy: {mode} at {placement.level}")
    }
    if len(members) == 1:
        out.update(slice_rule(members[0].count, placement))
    return out
