"""Kueue's rules for the TAS annotations of a pod template (SPEC §3, never silently refused).

Kueue v0.19.2 checks a workload's podset annotations in ``pkg/controller/jobframework/
tas_validation.go``; each finding here quotes its message:

- ``ValidateTASPodSetRequest`` (every kind's webhook): at most one of required, preferred and
  unconstrained; ``podset-group-name`` not a number, never next to ``podset-slice-size``,
  ``podset-slice-required-topology`` or ``podset-slice-required-topology-constraints``, and only
  next to required or preferred; ``podset-slice-size`` and ``podset-slice-required-topology``
  only together; a slice size of at least 1;
- ``ValidateSliceSizeAnnotationUpperBound`` (every kind's webhook but the Pod's, which checks the
  pods of a Deployment, ReplicaSet or StatefulSet too): a slice size no greater than the podset's
  pods;
- the Workload CRD (every kind, an AppWrapper's components too): a ``podset-group-name`` next to
  required or preferred, which Kueue copies into the Workload's ``podSetGroupName``, of at most
  256 characters (``maxLength``), else Kueue never creates the Workload;
- ``ValidatePodSetGroupingTopology`` (run by the JobSet, LeaderWorkerSet, MPIJob, RayCluster,
  RayJob and RayService webhooks; the TAS scheduler's ``findLeaderAndWorkers`` assumes it of every
  kind, and a finding on another kind says so rather than that Kueue refuses it): a group
  (the podsets whose ``podset-group-name`` Kueue keeps, i.e. with required or preferred) of
  exactly 2 podsets, at least one of 1 pod, both asking the same request type at the same level;
- no webhook's, so the message is ours: a slice size that divides the podset's pods (KEP-2724:
  it "has to evenly divide the size of a PodSet"). Kueue admits the workload, but its TAS places whole
  slices only (``TASFlavorSnapshot.findTopologyAssignment``: ``sliceCount := count / sliceSize``
  in ``findLevelWithFitDomains`` and ``updateCountsToMinimumGeneric``), so the Workload keeps its
  full count while its topology assignment holds fewer pods, and Kueue's topology ungater
  (``pkg/controller/tas/topology_ungater.go``) leaves the other pods gated until pods of the
  podset end. Always a warning (:func:`slice_remainder`).

What Kueue refuses of the values themselves (levels that are no label keys, an unconstrained flag
that is no boolean, multi-layer slices, required or preferred topology on an elastic Job, levels
the Workload CRD cannot hold) is :mod:`webhook.core.plan.rules.kueue_slices`'s, reported here. Every
finding is made in every team namespace, whatever the team's topology rule, with one message.

No Kueue webhook checks an AppWrapper's components or a HyperPodPyTorchJob: their findings say
so. A slice size that is no integer is a malformed count (:mod:`webhook.core.kueue.view`), not repeated here.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from webhook.core.kueue.versions import DEFAULT_KUEUE_VERSION, KueueRelease, kueue_release
from webhook.core.kueue.view import (
    GROUP_NAME,
    PREFERRED,
    REQUIRED,
    SLICE_CONSTRAINTS,
    SLICE_REQUIRED,
    SLICE_SIZE,
    UNCONSTRAINED,
    PodSet,
    WorkloadView,
)
from webhook.core.objects.integers import decimal_int
from webhook.core.plan.draft import Plan
from webhook.core.plan.rules.kueue_slices import (
    crd_errors,
    elastic_errors,
    first_layer_above,
    first_layer_remainder,
    layer_errors,
    value_errors,
)
from webhook.core.platform.platform import Enforcement
from webhook.core.platform.policy import TeamPolicyCompiled

__all__ = [
    "GROUP_NAME_MAX",
    "check_kueue_tas",
    "group_problems",
    "kueue_tas_findings",
    "refused_group",
    "slice_remainder",
    "user_groups",
]

_REQUEST = "ValidateTASPodSetRequest"
_BOUND = "ValidateSliceSizeAnnotationUpperBound"
_GROUPING = "ValidatePodSetGroupingTopology"
#: Kueue v0.19.2's Job webhook, which refuses required and preferred topology on an elastic Job.
_ELASTIC = "JobWebhook.validateTopologyRequest"
#: Kueue v0.19.2's TAS (``pkg/cache/scheduler/tas_flavor_snapshot.go``), which places whole slices.
_WHOLE_SLICES = "TASFlavorSnapshot.findTopologyAssignment"
#: The Workload CRD (``kueue.x-k8s.io/v1beta2``): ``podSetGroupName`` has ``maxLength: 256``, so
#: Kueue cannot create the Workload of a podset whose kept group name is longer.
_CRD = "Workload CRD podSetGroupName maxLength"
#: The Workload CRD's ``maxLength: 63`` of each topology level (``required``, ``preferred``,
#: ``podSetSliceRequiredTopology``, a slice layer's ``topology``): :func:`.kueue_slices.crd_errors`.
_LEVEL_CRD = "Workload CRD topology level maxLength"
#: Kueue v0.19.2's longest ``podSetGroupName`` (the Workload's ``+kubebuilder:validation:MaxLength``).
GROUP_NAME_MAX = 256
#: The release whose rules apply when a caller names none (the platform file's default).
DEFAULT_RELEASE = kueue_release(DEFAULT_KUEUE_VERSION)


def _number(name: str) -> bool:
    """Whether Go's ``strconv.ParseUint(name, 10, 64)`` reads ``name``."""
    return name.isascii() and name.isdigit() and len(name.lstrip("0")) <= 20 and int(name) < 2**64


def _finding(
    podset: PodSet, key: str, value: Any, message: str, source: str, release: KueueRelease = DEFAULT_RELEASE
) -> tuple[str, str]:
    shown = "" if value is None else f" {value!r}"
    return f"podset {podset.name!r}: {key}{shown}: {message} ({release.label} {source})", source


def podset_problems(podset: PodSet, release: KueueRelease = DEFAULT_RELEASE) -> list[str]:
    """Kueue's findings on one podset's own TAS annotations (``ValidateTASPodSetRequest`` and
    ``ValidateSliceSizeAnnotationUpperBound``) under ``release``'s rules (:mod:`webhook.core.kueue.versions`),
    each one line naming the podset and the key."""
    return [message for message, _ in _podset_findings(podset, release)]


def _podset_findings(podset: PodSet, release: KueueRelease = DEFAULT_RELEASE) -> list[tuple[str, str]]:
    """:func:`podset_problems`, each with the Kueue function that finds it."""
    a: Mapping[str, Any] = podset.annotations
    out: list[tuple[str, str]] = []
    finding = functools.partial(_finding, release=release)

    modes = [key for key in (REQUIRED, PREFERRED, UNCONSTRAINED) if key in a]
    if len(modes) > 1:
        listed = ", ".join(f'"{key}"' for key in (REQUIRED, PREFERRED, UNCONSTRAINED))
        message = f"must not contain more than one topology annotation: [{listed}]"
        out.append(finding(podset, "annotations", None, message, _REQUEST))
    out.extend(finding(podset, key, value, message, _REQUEST) for key, value, message in value_errors(a, release))
    group = a.get(GROUP_NAME)
    if isinstance(group, str):
        if _number(group):
            out.append(finding(podset, GROUP_NAME, group, "must not be a number", _REQUEST))
        for key in (SLICE_SIZE, SLICE_REQUIRED) if not release.grouped_slicing else ():
            if key in a:
                out.append(finding(podset, GROUP_NAME, group, f"may not be set when '{key}' is specified", _REQUEST))
        if REQUIRED not in a and PREFERRED not in a:
            message = f"may not be set when neither '{PREFERRED}' nor '{REQUIRED}' is specified"
            out.append(finding(podset, GROUP_NAME, group, message, _REQUEST))
        if SLICE_CONSTRAINTS in a and not release.grouped_slicing:
            message = f"may not be set when '{SLICE_CONSTRAINTS}' is specified"
            out.append(finding(podset, GROUP_NAME, group, message, _REQUEST))
        if len(group) > GROUP_NAME_MAX and (REQUIRED in a or PREFERRED in a):
            message = (
                f"must be at most {GROUP_NAME_MAX} characters, got {len(group)}: Kueue copies it into its "
                "Workload's podSetGroupName, which the API server refuses longer, so the Workload is never created"
            )
            out.append(finding(podset, GROUP_NAME, group, message, _CRD))
    size = a.get(SLICE_SIZE)
    number = decimal_int(size) if isinstance(size, str) else None  # else: not Kueue's number (wellformed says so)
    if isinstance(size, str) and number is not None:
        if number < 1:
            out.append(finding(podset, SLICE_SIZE, size, "must be greater than or equal to 1", _REQUEST))
        elif number > podset.count:
            message = f"must not be greater than pod set count {podset.count}"
            out.append(finding(podset, SLICE_SIZE, size, message, _BOUND))
    if SLICE_REQUIRED in a and SLICE_SIZE not in a:
        message = f"must be set when '{SLICE_REQUIRED}' is specified"
        out.append(finding(podset, SLICE_SIZE, None, message, _REQUEST))
    if SLICE_SIZE in a and SLICE_REQUIRED not in a:
        message = f"may not be set when '{SLICE_REQUIRED}' is not specified"
        out.append(finding(podset, SLICE_SIZE, None, message, _REQUEST))
    sourced = [
        (_REQUEST, layer_errors(a)),
        (_BOUND, first_layer_above(a, podset.count) + first_layer_remainder(a, podset.count, release)),
    ]
    if not out and not sourced[0][1]:  # Kueue copies only levels it accepts into its Workload
        sourced.append((_LEVEL_CRD, crd_errors(a)))
    out.extend(
        finding(podset, key, value, message, source) for source, found in sourced for key, value, message in found
    )
    return out


def slice_remainder(podset: PodSet, release: KueueRelease = DEFAULT_RELEASE) -> str | None:
    """The finding on a podset whose ``podset-slice-size`` (next to ``podset-slice-required-topology``,
    without which Kueue takes no slices: ``jobframework.NewPodSetTopologyRequest``) is at most its
    pods but does not divide them; None otherwise, and for one Pod of a pod group (its role's pods
    are unknown). A size above the pods is ``ValidateSliceSizeAnnotationUpperBound``'s finding.

    Kueue v0.19.2 admits such a workload (no webhook checks it) and its TAS places
    ``count // size`` whole slices (``TASFlavorSnapshot.findTopologyAssignment``); the other
    ``count % size`` pods stay gated (``topologyUngater``: a domain's pods are ungated up to its
    assigned count, counting only pods not terminated) until pods of the podset end, so a workload
    whose pods must all run together never runs them all, e.g. ``podset 'main': …podset-slice-size '2':
    must divide pod set count 3: Kueue's TAS places 1 whole slice (2 pods) and leaves the other 1
    pod gated until pods of this podset end (…)``.

    None under a release with partial slices (``release.partial_slices``, Kueue v0.20's
    ``TASPartialSlices``): its TAS places the last slice with the remaining pods."""
    a: Mapping[str, Any] = podset.annotations
    size = a.get(SLICE_SIZE)
    if (
        release.partial_slices
        or podset.partial
        or SLICE_REQUIRED not in a
        or not isinstance(size, str)
        or not size.isascii()
    ):
        return None
    number = decimal_int(size, signs="")
    if number is None or not 1 <= number <= podset.count or podset.count % number == 0:
        return None
    slices, rest = divmod(podset.count, number)
    message = (
        f"must divide pod set count {podset.count}: Kueue's TAS places {slices} whole "
        f"{'slice' if slices == 1 else 'slices'} ({slices * number} pods) and leaves the other "
        f"{rest} {'pod' if rest == 1 else 'pods'} gated until pods of this podset end"
    )
    return _finding(podset, SLICE_SIZE, size, message, _WHOLE_SLICES, release)[0]


def user_groups(podsets: Sequence[PodSet]) -> dict[str, list[PodSet]]:
    """Every ``podset-group-name`` the podsets carry → its podsets, in order (as written)."""
    groups: dict[str, list[PodSet]] = {}
    for podset in podsets:
        if podset.group is not None:
            groups.setdefault(podset.group, []).append(podset)
    return groups


def _shape_problems(name: str, members: Sequence[PodSet], release: KueueRelease = DEFAULT_RELEASE) -> list[str]:
    """The group's size, pod counts and name as Kueue checks them (not the members' levels)."""
    where = " + ".join(repr(p.name) for p in members)
    head = f"podset {where}: {GROUP_NAME} {name!r}"
    if len(members) != 2:
        return [
            f"{head}: can only define groups of exactly 2 pod sets, got: {len(members)} pod set(s) "
            f"({release.label} {_GROUPING})"
        ]
    first, second = members
    if first.count != 1 and second.count != 1:
        return [
            f"{head}: can only define groups where at least one pod set has only 1 replica, got: "
            f"{first.count} replica(s) and {second.count} replica(s) in the group ({release.label} {_GROUPING})"
        ]
    return []


def refused_group(name: str, members: Sequence[PodSet]) -> bool:
    """Whether Kueue refuses group ``name`` of ``members`` (the podsets carrying it) whatever
    topology they ask for: not 2 podsets, none of 1 pod, or a name that is a number. The topology
    rule adds no annotation to such a group (:func:`webhook.core.plan.rules.topology.plan_topology`)."""
    return _number(name) or bool(_shape_problems(name, members))


def _request(podset: PodSet) -> tuple[str | None, str | None]:
    a = podset.annotations
    required = a.get(REQUIRED)
    return (required, None) if required is not None else (None, a.get(PREFERRED))


def group_problems(podsets: Sequence[PodSet], release: KueueRelease = DEFAULT_RELEASE) -> list[str]:
    """Kueue's ``ValidatePodSetGroupingTopology`` findings: groups are the podsets whose
    ``podset-group-name`` Kueue keeps (those with required or preferred topology)."""
    kept = [p for p in podsets if REQUIRED in p.annotations or PREFERRED in p.annotations]
    out: list[str] = []
    for name, members in user_groups(kept).items():
        shape = _shape_problems(name, members, release)
        out.extend(shape)
        if len(members) == 2 and _request(members[0]) != _request(members[1]):
            first, second = members
            out.append(
                f"podset {first.name!r} + {second.name!r}: must specify '{REQUIRED}' or '{PREFERRED}' topology "
                f"consistent with each other in group {name!r} ({release.label} {_GROUPING})"
            )
    return out


#: Kinds whose Kueue webhook runs ``ValidatePodSetGroupingTopology`` (v0.19.2: the JobSet,
#: LeaderWorkerSet, MPIJob and Ray webhooks); for the others Kueue's TAS only assumes it.
GROUPS_CHECKED = frozenset({"JobSet", "LeaderWorkerSet", "MPIJob", "RayCluster", "RayJob", "RayService"})
#: Kinds whose pod templates no Kueue webhook checks (an AppWrapper's components; a kind Kueue
#: manages through an external framework).
UNCHECKED = frozenset({"AppWrapper", "HyperPodPyTorchJob"})
#: Kinds whose pods Kueue's Pod webhook checks one by one (v0.19.2 ``pod_webhook.go``: only
#: ``ValidateTASPodSetRequest``; the Deployment, ReplicaSet and StatefulSet webhooks check no TAS
#: annotation): no webhook bounds their slice size by the pods, which Kueue's TAS only assumes.
POD_CHECKED = frozenset({"Pod", "Deployment", "ReplicaSet", "StatefulSet"})
#: Each Kueue check run by every kind's webhook but these.
_SKIPPED_BY = {
    _REQUEST: UNCHECKED,
    _BOUND: UNCHECKED | POD_CHECKED,
    _CRD: frozenset[str](),
    _LEVEL_CRD: frozenset[str](),
}


def _refused(source: str, kind: str) -> bool:
    """Whether Kueue's webhook for ``kind`` runs the check ``source`` (so refuses what it finds)."""
    if source == _WHOLE_SLICES:
        return False  # no Kueue webhook checks it
    if source == _ELASTIC:
        return True  # found only for a kind whose webhook refuses it (elastic_forbidden)
    return kind in GROUPS_CHECKED if source == _GROUPING else kind not in _SKIPPED_BY[source]


def _sourced_problems(
    view: WorkloadView, forbidden: Sequence[str] = (), release: KueueRelease = DEFAULT_RELEASE
) -> list[tuple[str, str]]:
    """:func:`kueue_tas_problems`, each with the Kueue function (or rule) that finds it."""
    podsets = [p for p in view.podsets if p.present]
    out: list[tuple[str, str]] = []
    for podset in podsets:
        out.extend(_podset_findings(podset, release))
        elastic = elastic_errors(podset.annotations, forbidden)
        out.extend(_finding(podset, key, value, message, _ELASTIC, release) for key, value, message in elastic)
        remainder = slice_remainder(podset, release)
        if remainder is not None:
            out.append((remainder, _WHOLE_SLICES))
    if not any(p.partial for p in podsets):
        grouped = group_problems(podsets, release)
        for name, members in user_groups(podsets).items():
            if not any(REQUIRED in p.annotations or PREFERRED in p.annotations for p in members):
                # no member asks for topology, and none is added: say what Kueue refuses once they do
                grouped.extend(
                    f"{problem}, so no topology is set on it" for problem in _shape_problems(name, members, release)
                )
        out.extend((problem, _GROUPING) for problem in grouped)
    return out


def kueue_tas_problems(
    view: WorkloadView, forbidden: Sequence[str] = (), release: KueueRelease = DEFAULT_RELEASE
) -> list[tuple[str, bool]]:
    """Every finding of Kueue's TAS annotation rules on ``view`` (see the module), each with
    whether Kueue's webhook for the kind refuses it (else only Kueue's TAS assumes the rule); none
    for a kind whose pods the object does not show, and no group rule when a member's size is
    unknown."""
    found = _sourced_problems(view, forbidden, release)
    return [(problem, _refused(source, view.row.kind)) for problem, source in found]


def kueue_tas_findings(
    view: WorkloadView, forbidden: Sequence[str] = (), release: KueueRelease = DEFAULT_RELEASE
) -> list[tuple[str, bool]]:
    """Each finding of :func:`kueue_tas_problems` on ``view`` as a user reads it (Kueue's message,
    then what follows: ``Kueue refuses the workload``, or that Kueue's TAS assumes the rule of this
    kind without checking it, or, for a slice size that does not divide the pods, that no Kueue
    webhook checks it), with whether Kueue's webhook for the kind refuses it. CREATE
    (:func:`check_kueue_tas`) and the UPDATE recheck (:mod:`webhook.core.plan.recheck`) both report these."""
    out: list[tuple[str, bool]] = []
    kind = view.row.kind
    for problem, source in _sourced_problems(view, forbidden, release):
        refused = _refused(source, kind)
        if refused:
            outcome = "Kueue refuses the workload"
        elif source == _WHOLE_SLICES:
            outcome = (
                "Kueue's TAS assumes this rule (KEP-2724: the slice size \"has to evenly divide the size of a "
                'PodSet"), which no Kueue webhook checks: the workload is admitted but not placed as asked'
            )
        else:
            outcome = (
                f"Kueue's TAS assumes this rule, which it does not check for a {kind}: "
                "the workload may not be placed as asked"
            )
        out.append((f"{problem}; {outcome}", refused))
    return out


def check_kueue_tas(view: WorkloadView, team: TeamPolicyCompiled, plan: Plan, forbidden: Sequence[str] = ()) -> bool:
    """Report each finding of :func:`kueue_tas_findings` on ``view`` (the planned object;
    ``forbidden``: :func:`webhook.core.plan.rules.topology.elastic_forbidden` of it), in every team
    namespace whatever the team's topology rule, with the same message: one Kueue's webhook
    refuses is a denial under ``enforce`` of the topology rule (of the queue rule for a team
    without one, as the other never-admitted findings), else a warning; one it does not check for
    the kind is always a warning (Kueue admits the workload). Returns whether any was made."""
    findings = kueue_tas_findings(view, forbidden, team.kueue)
    rule = team.topology if team.topology is not None else team.queue
    level: Enforcement = "enforce" if rule.enforcement == "enforce" else "warn"
    for message, refused in findings:
        plan.report(level if refused else "warn", "topology", message)
    return bool(findings)
