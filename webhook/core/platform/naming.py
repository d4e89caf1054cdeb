"""The naming preset (SPEC §2): Kubernetes and Kueue object names derived from platform names.

``default`` uses the platform names nearly as they are; ``hyperpod`` reproduces SageMaker
HyperPod's conventions (namespace ``hyperpod-ns-<team>``, LocalQueue
``hyperpod-ns-<team>-localqueue``, ClusterQueue ``hyperpod-ns-<team>-clusterqueue``, priority
``<name>-priority``).

Both :mod:`webhook.core.platform.platform` (which checks that every derived name is valid where it lands)
and :mod:`webhook.core.platform.policy` (which compiles them for the webhook) use these functions; they
read only a few attributes of the platform models, so this module needs them for type hints only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from webhook.core.platform.models import Platform, TeamSpec

__all__ = [
    "SYSTEM_NAMESPACES",
    "cluster_queue_name",
    "local_queue_name",
    "priority_class_name",
    "team_namespaces",
]

#: SPEC §3: namespaces the webhook never touches, whatever the platform file says.
SYSTEM_NAMESPACES = ("kube-system", "kube-node-lease", "kube-public")


def team_namespaces(platform: Platform, team: TeamSpec) -> list[str]:
    """Namespace names of a team: as listed, else by the naming preset.

    ``hyperpod`` → ``hyperpod-ns-<team>``; ``default`` → ``<team>``. A team selected only by a
    ``namespaceSelector`` has none listed and gets none by default.
    """
    if team.namespaces:
        return list(team.namespaces)
    if team.namespaceSelector is not None:
        return []
    return [f"hyperpod-ns-{team.name}" if platform.naming == "hyperpod" else team.name]


def local_queue_name(platform: Platform, team: TeamSpec) -> str:
    """LocalQueue of a team (one per team namespace, same name in each)."""
    return f"hyperpod-ns-{team.name}-localqueue" if platform.naming == "hyperpod" else f"{team.name}-queue"


def cluster_queue_name(platform: Platform, team: TeamSpec) -> str:
    """ClusterQueue of a team."""
    return f"hyperpod-ns-{team.name}-clusterqueue" if platform.naming == "hyperpod" else team.name


def priority_class_name(platform: Platform, priority: str) -> str:
    """WorkloadPriorityClass (and PriorityClass) object name of a platform priority."""
    return f"{priority}-priority" if platform.naming == "hyperpod" else priority
