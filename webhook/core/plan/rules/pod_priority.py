"""Pod priority rule: ``priorityClassName`` of every podset's pods (SPEC §3).

A podset without one gets, in this order: the one value the workload's other podsets agree on,
the workload's Kueue priority label, the team's default, each only when the team may use it. An
empty ``priorityClassName`` is none: the API server's Priority admission plugin gives a pod with
``len(pod.Spec.PriorityClassName) == 0`` the cluster's default priority
(``plugin/pkg/admission/priority/admission.go``, ``admitPod``), and Kueue skips it too
(``jobframework.extractPriorityFromPodSets``, ``KubeflowJob.PriorityClass``), so ``""`` is
replaced like a missing one and never checked as a class name. A pod that already has
``spec.priority`` is left alone. A team without a ``podPriority`` rule is
held to its Kueue priorities: a pod may not take a PriorityClass the team may not use as its
Kueue priority (SPEC §12, no raising priority above what the team is allowed).

The allowed values a message lists are only PriorityClasses the platform generates
(``TeamPolicyCompiled.priorityClasses``, the generator's own source). A priorityClassName the
policy knows has no PriorityClass (a platform priority without ``podPriorityClass``) is warned
about: the API server refuses such pods unless a PriorityClass of that name exists anyway. Names
the policy does not know (``system-cluster-critical``, a cluster's own classes) are only checked
against the team's allowed set.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.kueue.kind_model import WorkloadKind
from webhook.core.kueue.view import PodSet, WorkloadView
from webhook.core.objects.paths import dotted, lookup
from webhook.core.plan.draft import Draft, Plan, check_value, string_map
from webhook.core.platform.policy import TeamPolicyCompiled, ValueRule
from webhook.core.platform.prepared import narrowed, prepared

__all__ = ["check_pod_priority", "check_priority_fields", "plan_pod_priority", "pod_rule", "user_pod_priority"]


def _value(podset: PodSet) -> Any:
    return lookup(podset.base, podset.rule.layout.priority)


def user_pod_priority(view: WorkloadView) -> str | None:
    """The one priorityClassName every podset that sets one (not ``""``) agrees on, else None."""
    names = {value for podset in view.podsets if isinstance(value := _value(podset), str) and value}
    return next(iter(names)) if len(names) == 1 else None


def _rule(team: TeamPolicyCompiled) -> ValueRule | None:
    return team.podPriority if team.podPriority is not None else team.kueuePriority


def check_pod_priority(podset: PodSet, team: TeamPolicyCompiled, plan: Plan) -> None:
    """Report a podset's own priorityClassName outside what the team may use."""
    rule = _rule(team)
    current = _value(podset)
    if current is None or current == "":  # "" is none to Kubernetes
        return
    where = dotted(podset.at(*podset.rule.layout.priority))
    if rule is not None and rule.allowed is not None and current not in rule.allowed:
        check_value(plan, "podPriority", pod_rule(rule, team), current, where, team, "PriorityClass")
    if current in team.workloadPriorityOnly:
        message = (
            f"PriorityClass {current!r} ({where}) is not created by the platform: {current!r} is a "
            f"WorkloadPriorityClass only; unless a PriorityClass of that name exists in the cluster, the "
            f"pods will not be created"
        )
        usable = pod_rule(rule, team).allowed if rule is not None else team.priorityClasses
        if usable:
            message += f" (PriorityClasses team {team.team!r} may use: {', '.join(usable)})"
        plan.report("warn", "podPriority", message)


def check_priority_fields(
    obj: Mapping[str, Any], row: WorkloadKind, team: TeamPolicyCompiled, plan: Plan, old: Mapping[str, Any] | None
) -> None:
    """Report a PriorityClass named by one of the kind's other fields (``row.priority_classes``)
    outside what the team's pods may use, as a podset's ``priorityClassName`` is; on UPDATE
    (``old`` given) only a value the update introduces or changes. ``""`` is none to Kueue
    (``KubeflowJob.PriorityClass`` then reads the pods'), so it is not checked."""
    rule = _rule(team)
    for path in row.priority_classes:
        value = lookup(obj, path)
        if value is None or value == "" or rule is None or rule.allowed is None or value in rule.allowed:
            continue
        if old is not None and lookup(old, path) == value:
            continue
        check_value(plan, "podPriority", pod_rule(rule, team), value, dotted(path), team, "PriorityClass")


def pod_rule(rule: ValueRule, team: TeamPolicyCompiled) -> ValueRule:
    """``rule`` with its allowed values narrowed to the PriorityClasses the platform generates
    (unchanged when the policy does not say which those are)."""
    own = prepared(team).pod_rules.get(id(rule))  # the team's own rules, narrowed once per policy
    return own if own is not None else narrowed(rule, team)


def plan_pod_priority(
    draft: Draft, podset: PodSet, team: TeamPolicyCompiled, kueue_priority: Any, asked: str | None
) -> None:
    """Fill in a missing or empty priorityClassName (see the module docstring for the value chosen);
    ``asked``: the workload's :func:`user_pod_priority`, ``kueue_priority``: its Kueue priority label."""
    rule = team.podPriority
    layout = podset.rule.layout
    if rule is None or not podset.present:
        return
    current = _value(podset)
    if (current is not None and current != "") or (
        layout.pod_priority and lookup(podset.base, layout.pod_priority) is not None
    ):
        return
    if layout.spec is not None:
        # The pod spec must be a map; no edit replaces one, so the podset's own reads it (the
        # draft's path from the root only for a value that is no map, where string_map raises).
        spec = lookup(podset.base, layout.spec)
        if spec is not None and type(spec) is not dict:
            string_map(draft, podset.at(*layout.spec))
    where = f"podset {podset.name!r}: "
    if current == "":
        where += "an empty priorityClassName is none to Kubernetes; "
    chosen: str | None = rule.default
    reason = f"{where}the default of team {team.team!r}"
    allowed = pod_rule(rule, team).allowed
    for candidate, why in (
        (asked, "the pod priority the workload's other podsets ask for"),
        (kueue_priority, "the Kueue priority the workload asks for"),
    ):
        usable = isinstance(candidate, str) and candidate != "" and candidate not in team.workloadPriorityOnly
        if usable and (allowed is None or candidate in allowed):
            chosen, reason = candidate, f"{where}{why}"
            break
    if chosen:
        draft.set_below(podset.path, layout.priority, chosen, "podPriority", reason)
