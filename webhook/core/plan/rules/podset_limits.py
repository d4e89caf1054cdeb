"""What keeps Kueue from ever creating a workload's Workload, and podsets that match no node.

Run first among the never-admitted checks (:func:`webhook.core.plan.rules.stranded.check_admissible`),
on the planned object; findings under the queue rule's enforcement. ``e2e/test_kueue_limits.py``
checks each against the real Kueue v0.19.2 and API server.
"""

from __future__ import annotations

import re

from webhook.core.kueue.view import WorkloadView
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
    (:mod:`webhook.core.plan.rules.node_affinity`), so that finding is for teams without one.

    Not judged: a Kubeflow job's replica keys (Kueue reads only its own replica types,
    case-sensitive, ``KubeflowJob.OrderedReplicaTypes``, and Kubeflow's webhook refuses any
    other key), an AppWrapper's components (named by its own adapter), a pod group's roles."""
    loud: Enforcement = "enforce" if team.queue.enforcement == "enforce" else "warn"
    podsets = view.podsets
    never = "the workload can never be admitted: Kueue never creates its Workload, as"
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
    for podset in podsets:
        if podset.present and podset.affinity_terms == []:
            message = (
                f"podset {podset.name!r} can never be admitted: its required node affinity has no nodeSelectorTerms, "
                "which matches no node (Kubernetes refuses such pods: must have at least one node selector term)"
            )
            plan.report(loud, "queue", message)
