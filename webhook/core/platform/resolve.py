"""Which team owns a namespace: by name first, then by the team's namespace label selector.

Pure: the namespace labels come from the caller's in-memory cache (the server's namespace watch,
or a ``kubectl get namespaces -o json`` dump for the CLI); no API call is made here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from webhook.core.platform.platform import LabelSelector
from webhook.core.platform.policy import PolicySet, TeamPolicyCompiled
from webhook.core.platform.prepared import prepared

__all__ = ["Resolution", "TeamIndex", "selector_matches"]


def selector_matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """Kubernetes label-selector semantics (matchLabels AND every matchExpression).

    An empty selector matches everything, as in Kubernetes.
    """
    for key, wanted in selector.matchLabels.items():
        if labels.get(key) != wanted:
            return False
    for requirement in selector.matchExpressions:
        present = requirement.key in labels
        value = labels.get(requirement.key)
        if requirement.operator == "In" and (not present or value not in requirement.values):
            return False
        if requirement.operator == "NotIn" and present and value in requirement.values:
            return False
        if requirement.operator == "Exists" and not present:
            return False
        if requirement.operator == "DoesNotExist" and present:
            return False
    return True


@dataclass(frozen=True)
class Resolution:
    """``team`` is None when the namespace is untouched; ``reason`` says why (for logs, --explain).

    ``conflict`` is set when two teams select the namespace: the request is then denied, since
    guessing a team would hand out another team's quota. ``labels_unknown`` is set when a team
    selects namespaces by labels and the namespace's labels were not known (a namespace cache that
    has not seen it yet): the caller decides whether to wait for them, refuse or pass.
    """

    team: TeamPolicyCompiled | None
    reason: str
    conflict: bool = False
    labels_unknown: bool = False


class TeamIndex:
    """Namespace → team lookup built once per policy version (O(1) by name); each team's
    per-request values are prepared here too (:func:`webhook.core.platform.prepared.prepared`), at policy
    load rather than on the first request."""

    def __init__(self, policies: PolicySet) -> None:
        self.policies = policies
        self._prepared = [prepared(team) for team in policies.teams]  # kept while the index lives
        self._excluded = frozenset(policies.excludedNamespaces)
        self._by_name: dict[str, TeamPolicyCompiled] = {}
        for team in policies.teams:
            for namespace in team.namespaces:
                self._by_name.setdefault(namespace, team)
        self._selecting = [t for t in policies.teams if t.namespaceSelector is not None]

    @property
    def needs_namespace_labels(self) -> bool:
        """True when some team selects namespaces by labels."""
        return bool(self._selecting)

    def resolve(self, namespace: str, labels: Mapping[str, str] | None) -> Resolution:
        """Find the team of ``namespace``; ``labels`` are its labels (None if unknown)."""
        if not namespace:
            return Resolution(None, "cluster-scoped object")
        if namespace in self._excluded:
            return Resolution(None, f"namespace {namespace!r} is excluded")
        team = self._by_name.get(namespace)
        if team is not None:
            return Resolution(team, f"namespace {namespace!r} is listed by team {team.team!r}")
        if labels is None:
            if self._selecting:
                return Resolution(None, f"labels of namespace {namespace!r} are unknown", labels_unknown=True)
            return Resolution(None, f"namespace {namespace!r} belongs to no team")
        matches = [
            t
            for t in self._selecting
            if t.namespaceSelector is not None and selector_matches(t.namespaceSelector, labels)
        ]
        if len(matches) > 1:
            names = ", ".join(repr(t.team) for t in matches)
            return Resolution(None, f"namespace {namespace!r} is selected by teams {names}", conflict=True)
        if matches:
            return Resolution(matches[0], f"namespace {namespace!r} matches team {matches[0].team!r}'s selector")
        return Resolution(None, f"namespace {namespace!r} belongs to no team")
