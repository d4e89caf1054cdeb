"""What keeps Kueue from ever creating a workload's Workload, or from ever admitting it (requests
above limits in a custom resource), and podsets that match no node.

Run first among the never-admitted checks (:func:`webhook.core.plan.rules.stranded.check_admissible`),
on the planned object; findings under the queue rule's enforcement. ``e2e/test_kueue_limits.py``
checks each against the real Kueue v0.19.2 and API server.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from decimal import ROUND_CEILING, Decimal
from typing import Any

from webhook.core.kueue.view import PodSet, WorkloadView
from webhook.core.kueue.wellformed import quantity
from webhook.core.objects.quantity import format_quantity
from webhook.core.plan.draft import Plan
from webhook.core.platform.platform import Enforcement
from webhook.core.platform.policy import TeamPolicyCompiled

__all__ = ["MAX_PODSETS", "check_podsets"]


#: Kueue v0.19.2's most podsets in one Workload: ``jobframework.MaxPodSets``
#: (``pkg/controller/jobframework/constants.go``), the ``+kubebuilder:validation:MaxItems=18`` of
#: ``WorkloadSpec.podSets`` (``apis/kueue/v1beta2/workload_types.go``).
MAX_PODSETS = 18

#: ``PodSetReference`` (``apis/kueue/v1beta2/workload_types.go``): ``MaxLength=63``, this pattern.
_PODSET_NAME = re.compile(r"(?=.{1,63}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def check_podsets(view: WorkloadView, team: TeamPolicyCompiled, plan: Plan) -> None:
    """Report, under the queue rule's enforcement, what keeps Kueue's Workload of ``view`` (the
    planned object) from ever being admitted: more than :data:`MAX_PODSETS` podsets (the CRD
    refuses the Workload: a JobSet's ``replicatedJobs``, whose count no Kueue webhook checks;
    Kueue's webhook refuses the Ray kinds first, ``raycluster.ValidateRayClusterSpec``); two
    podsets of one name once Kueue lower-cases them (``NewPodSetReference``; ``podSets`` is a list
    map keyed by ``name``: ``Worker`` and ``worker`` collide); a name taken from the user (a
    replicatedJob, a Ray ``groupName``) that is no ``PodSetReference``; a podset whose required
    node affinity has an empty ``nodeSelectorTerms``, which matches no node (terms are ORed;
    Kubernetes refuses such a Pod, ``ValidateNodeSelector`` in ``pkg/apis/core/validation``: "must
    have at least one node selector term"). A team's node affinity fills such a list
    (:mod:`webhook.core.plan.rules.node_affinity`), so that finding is for teams without one. A
    podset Kueue cannot build (a fault-tolerant Ray head without its Ray container:
    :func:`webhook.core.kueue.injected.unbuildable`), which Kueue's Ray webhooks refuse (their
    ``validateTopologyRequest`` returns the error of ``PodSets``). An
    AppWrapper whose podset names (``<name>-<index>``) are no ``PodSetReference``. In a custom
    resource (the API server checks only built-in kinds' pod templates), a request above its limit
    in the pod Kueue builds (a container's, an init container's, the pod-level resources'; a Ray
    head's injected containers included): Kueue creates the Workload but never admits it.

    Not judged: a Kubeflow job's replica keys (Kueue reads only its own replica types,
    case-sensitive, ``KubeflowJob.OrderedReplicaTypes``, and Kubeflow's webhook refuses any
    other key), an AppWrapper's components (named by its own adapter), a pod group's roles."""
    loud: Enforcement = "enforce" if team.queue.enforcement == "enforce" else "warn"
    podsets = view.podsets
    never = "the workload can never be admitted: Kueue never creates its Workload, as"
    for podset in podsets:
        if podset.unbuilt is not None:
            message = f"Kueue refuses the workload, as it cannot build podset {podset.name!r}: {podset.unbuilt}"
            plan.report(loud, "queue", message)
    if len(podsets) > MAX_PODSETS:
        names = ", ".join(repr(p.name) for p in podsets)
        message = f"{never} a Workload holds at most {MAX_PODSETS} podsets and it has {len(podsets)} ({names})"
        plan.report(loud, "queue", message)
    named = [p for p in podsets if p.present and not p.partial and not p.rule.keyed and view.row.embedded is None]
    for name in sorted({p.name for p in named}):
        if (times := sum(p.name == name for p in named)) > 1:
            plan.report(loud, "queue", f"{never} {times} of its podsets are named {name!r} (Kueue lower-cases them)")
    for podset in named:
        if podset.name != podset.rule.name and not _PODSET_NAME.fullmatch(podset.name):
            message = (
                f"{never} its podset name {podset.name!r} is no podset name Kueue takes (lower-case "
                "letters, digits and '-', starting and ending alphanumeric, at most 63 characters)"
            )
            plan.report(loud, "queue", message)
    if view.row.embedded is not None:
        _check_appwrapper_names(view, loud, plan)
    if not view.row.built_in:
        for podset in podsets:
            for where, name, request, limit in _over_limits(podset):
                message = (
                    f"podset {podset.name!r} can never be admitted: {where} requests {name} "
                    f"{format_quantity(request)}, above its limit {format_quantity(limit)}; Kueue leaves such a "
                    "Workload pending (ValidateResources: requests must not exceed its limits), and the API "
                    "server checks this only for built-in kinds"
                )
                plan.report(loud, "queue", message)
    for podset in podsets:
        if podset.present and podset.affinity_terms == []:
            message = (
                f"podset {podset.name!r} can never be admitted: its required node affinity has no nodeSelectorTerms, "
                "which matches no node (Kubernetes refuses such pods: must have at least one node selector term)"
            )
            plan.report(loud, "queue", message)


def _check_appwrapper_names(view: WorkloadView, loud: Enforcement, plan: Plan) -> None:
    """Kueue names an AppWrapper's podsets ``<name>-<index>``, lower-cased (v0.19.2
    ``pkg/controller/jobs/appwrapper`` ``PodSets``); an object name with a dot, or one so long that
    ``<name>-<index>`` passes 63 characters, is no ``PodSetReference``: the Workload CRD refuses it."""
    bad = [p.name for p in view.podsets if "/" not in p.name and not _PODSET_NAME.fullmatch(p.name)]
    if bad:
        plan.report(
            loud,
            "queue",
            f"the workload can never be admitted: Kueue never creates its Workload, as it names the "
            f"AppWrapper's podsets after it ({', '.join(repr(n) for n in bad)}) and these are no podset names "
            "(lower-case letters, digits and '-', starting and ending alphanumeric, at most 63 characters): "
            "use a shorter name without dots",
        )


def _amount(name: str, value: Any) -> int | None:
    """Kueue's integer of a quantity (``resources.ResourceValue``): millicores for cpu, else units,
    rounded up; None for a value that is no quantity (the view reports those)."""
    parsed = quantity(value, (), [])
    if parsed is None:
        return None
    scaled = parsed * 1000 if name == "cpu" else parsed
    return int(scaled.to_integral_value(rounding=ROUND_CEILING))


def _resource_holders(spec: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    for key, what in (("initContainers", "init container"), ("containers", "container")):
        items = spec.get(key)
        for index, container in enumerate(items if isinstance(items, list) else []):
            if isinstance(container, Mapping):
                name = container.get("name")
                yield f"{what} {name!r}" if isinstance(name, str) else f"{what} {index}", container.get("resources")
    yield "the pod-level resources", spec.get("resources")


def _over_limits(podset: PodSet) -> Iterator[tuple[str, str, Decimal, Decimal]]:
    """(where, resource, request, limit) of each request above its limit in the pod spec Kueue
    holds for ``podset`` (the containers KubeRay injects included), compared as Kueue does
    (``workload.ValidateResources``: ``GreaterKeysRL`` of the integer values)."""
    for where, resources in _resource_holders(podset.spec):
        if not isinstance(resources, Mapping):
            continue
        requests, limits = resources.get("requests"), resources.get("limits")
        if not isinstance(requests, Mapping) or not isinstance(limits, Mapping):
            continue
        for name, value in requests.items():
            if name not in limits:
                continue
            request, limit = _amount(str(name), value), _amount(str(name), limits[name])
            if request is not None and limit is not None and request > limit:
                yield (
                    where,
                    str(name),
                    quantity(value, (), []) or Decimal(0),
                    quantity(limits[name], (), []) or Decimal(0),
                )
