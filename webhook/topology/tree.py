"""The tree of network nodes: domains of each topology level, hosts at the leaves, accelerators.

Built from plain objects as the API returns them (``kubectl get nodes|pods -o json`` items, Kueue
Workloads). Per host: ``allocatable`` is ``status.allocatable[resource]``; ``used`` the requests
of the pods bound there (``spec.nodeName``, not Succeeded/Failed) and, when Workloads are given,
the usage Kueue's topology assignments put there; ``free`` is ``allocatable - used`` on a
schedulable node and 0 on a node that is not Ready, cordoned or tainted ``node.kubernetes.io/*``
(Kueue's TAS leaves those out of its snapshot; :class:`webhook.core.kueue.inventory.Node`), and 0 on a
node with a ``NoSchedule``/``NoExecute`` taint that no ResourceFlavor tolerates (the tree's
``tolerations``): Kueue's TAS excludes it for every pod that does not tolerate the taint itself,
as ``kgov why`` counts it (``taint "key=value:Effect"``).

How Kueue counts (``pkg/cache/scheduler/tas_flavor.go``, ``pkg/controller/tas/
non_tas_usage_controller.go``): a Workload with quota reserved counts with its
``topologyAssignment``; a bound pod counts on its node unless it is a TAS pod (annotation
``kueue.x-k8s.io/podset-{required,preferred,unconstrained}-topology``), whose Workload already
counts. :meth:`TopologyTree.add_pods` with ``skip_tas_pods=True`` plus
:meth:`TopologyTree.add_workloads` is that view; ``add_pods`` alone counts every bound pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from webhook.core.kueue.inventory import pod_requests
from webhook.core.kueue.scheduling import taint_string, tolerates
from webhook.core.objects.quantity import QuantityError, parse_quantity

__all__ = [
    "ACCELERATOR_RESOURCES",
    "AWS_LAYER_LABELS",
    "HOSTNAME_LABEL",
    "TAS_POD_ANNOTATIONS",
    "Domain",
    "Host",
    "TopologyTree",
    "assignment_domains",
    "default_levels",
    "node_state",
    "pick_resource",
    "untolerated_taints",
]

HOSTNAME_LABEL = "kubernetes.io/hostname"
#: EC2's network-node labels, broadest first (EKS/HyperPod set 3, or 4 on p6-b200 UltraServers).
AWS_LAYER_LABELS = tuple(f"topology.k8s.aws/network-node-layer-{n}" for n in range(1, 5))
#: Extended resources counted as accelerators, the first present in the nodes being the default.
ACCELERATOR_RESOURCES = (
    "nvidia.com/gpu",
    "amd.com/gpu",
    "aws.amazon.com/neuron",
    "aws.amazon.com/neuroncore",
    "aws.amazon.com/neurondevice",
    "habana.ai/gaudi",
    "google.com/tpu",
)
#: Pod annotations that make a pod a TAS pod for Kueue (``utiltas.IsTAS``).
TAS_POD_ANNOTATIONS = (
    "kueue.x-k8s.io/podset-required-topology",
    "kueue.x-k8s.io/podset-preferred-topology",
    "kueue.x-k8s.io/podset-unconstrained-topology",
)
_ZERO = Decimal(0)


def _map(value: Any) -> Mapping[str, Any]:
    # dict first: JSON gives dicts, and the ABC check is most of the time on 10,000 nodes.
    return value if type(value) is dict or isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


_quantities: dict[str, Decimal] = {}


def _quantity(value: Any) -> Decimal:
    """An allocatable quantity in base units, 0 when unparsable or negative (as
    :class:`webhook.core.kueue.inventory.Node`; a node file is checked before, a live Node by the API server)."""
    key = str(value)
    found = _quantities.get(key)
    if found is None:
        try:
            found = max(parse_quantity(value), _ZERO)
        except (QuantityError, TypeError):
            found = _ZERO
        if len(_quantities) < 4096:
            _quantities[key] = found
    return found


def node_state(obj: Mapping[str, Any]) -> tuple[bool, bool, bool]:
    """``(ready, cordoned, schedulable)`` of a core/v1 Node: Ready condition True;
    ``spec.unschedulable``; and whether Kueue's TAS counts it, by the rule of
    :meth:`webhook.core.kueue.inventory.Node.from_object` (Ready, not cordoned) and no ``node.kubernetes.io/*``
    NoSchedule or NoExecute taint among its blocking taints (other taints depend on the pod's and
    the flavor's tolerations, so the tree does not judge them)."""
    spec, status = _map(obj.get("spec")), _map(obj.get("status"))
    ready = any(
        _map(c).get("type") == "Ready" and _map(c).get("status") == "True" for c in _list(status.get("conditions"))
    )
    cordoned = spec.get("unschedulable") is True
    blocked = any(
        _map(t).get("effect") in ("NoSchedule", "NoExecute")
        and str(_map(t).get("key", "")).startswith("node.kubernetes.io/")
        for t in _list(spec.get("taints"))
    )
    return ready, cordoned, ready and not cordoned and not blocked


def untolerated_taints(obj: Mapping[str, Any], tolerations: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The ``NoSchedule``/``NoExecute`` taints of a core/v1 Node that ``tolerations`` (the
    ResourceFlavors') do not tolerate, other than ``node.kubernetes.io/*`` (see :func:`node_state`),
    as ``key=value:Effect`` (``key:Effect`` without a value, as ``corev1.Taint.ToString``)."""
    out = []
    for taint in _list(_map(obj.get("spec")).get("taints")):
        taint = _map(taint)
        key = str(taint.get("key", ""))
        if taint.get("effect") not in ("NoSchedule", "NoExecute") or key.startswith("node.kubernetes.io/"):
            continue
        if not tolerates(tolerations, taint):
            out.append(taint_string(taint))
    return tuple(out)


def pick_resource(nodes: Iterable[Mapping[str, Any]]) -> str:
    """The first of :data:`ACCELERATOR_RESOURCES` any node has allocatable (``nvidia.com/gpu``
    when none has one)."""
    present: set[str] = set()
    for node in nodes:
        present.update(str(k) for k in _map(_map(node.get("status")).get("allocatable")))
    return next((name for name in ACCELERATOR_RESOURCES if name in present), ACCELERATOR_RESOURCES[0])


def default_levels(nodes: Iterable[Mapping[str, Any]]) -> list[str]:
    """The AWS layer labels (:data:`AWS_LAYER_LABELS`) up to the deepest one any node carries,
    then ``kubernetes.io/hostname``; just the first three layers when no node has any."""
    deepest = 0
    for node in nodes:
        labels = _map(_map(node.get("metadata")).get("labels"))
        for depth in range(len(AWS_LAYER_LABELS), deepest, -1):
            if AWS_LAYER_LABELS[depth - 1] in labels:
                deepest = depth
                break
    return [*AWS_LAYER_LABELS[: deepest or 3], HOSTNAME_LABEL]


@dataclass
class Host:
    """One node: its accelerators (``allocatable``, ``used``: base units) and its state."""

    name: str
    labels: Mapping[str, str]
    path: tuple[str, ...]
    allocatable: Decimal
    ready: bool
    cordoned: bool
    schedulable: bool
    used: Decimal = _ZERO
    #: Taints no ResourceFlavor tolerates (:func:`untolerated_taints`): pods not tolerating them stay off.
    taints: tuple[str, ...] = ()

    @property
    def free(self) -> Decimal:
        """Unrequested accelerators a new pod could get (0 on an unschedulable or tainted node)."""
        return max(self.allocatable - self.used, _ZERO) if self.available else _ZERO

    @property
    def available(self) -> bool:
        """Takes new pods that tolerate no taint of their own: schedulable and no untolerated taint."""
        return self.schedulable and not self.taints

    @property
    def marks(self) -> list[str]:
        """Why the node takes no new pods: ``NotReady``, ``cordoned``, ``tainted`` (a
        ``node.kubernetes.io/*`` taint), ``tainted key=value:Effect`` per taint no ResourceFlavor
        tolerates (empty: it takes any pod)."""
        out = [] if self.ready else ["NotReady"]
        if self.cordoned:
            out.append("cordoned")
        if self.ready and not self.cordoned and not self.schedulable:
            out.append("tainted")
        out.extend(f"tainted {taint}" for taint in self.taints)
        return out


@dataclass
class Domain:
    """One domain of a level (``level`` the node label key, ``value`` its value; the root has
    ``depth`` -1). ``children`` are the domains one level narrower, in name order; ``hosts`` the
    nodes of a deepest-level domain; ``used_here`` usage Kueue assigned to the domain as a whole
    (an assignment whose narrowest level is not the hostname). Totals come from :meth:`total`."""

    level: str
    value: str
    depth: int
    children: dict[str, Domain] = field(default_factory=dict)
    hosts: list[Host] = field(default_factory=list)
    used_here: Decimal = _ZERO
    nodes: int = 0
    unavailable: int = 0
    allocatable: Decimal = _ZERO
    free: Decimal = _ZERO

    def total(self) -> None:
        """Fill ``nodes``, ``unavailable`` (not :attr:`Host.available`), ``allocatable`` and ``free``, recursively."""
        self.children = dict(sorted(self.children.items()))
        self.hosts.sort(key=lambda h: h.name)
        nodes, unavailable, allocatable, free = len(self.hosts), 0, _ZERO, _ZERO
        for host in self.hosts:
            unavailable += not host.available
            allocatable += host.allocatable
            free += host.free
        for child in self.children.values():
            child.total()
            nodes += child.nodes
            unavailable += child.unavailable
            allocatable += child.allocatable
            free += child.free
        self.nodes, self.unavailable, self.allocatable = nodes, unavailable, allocatable
        self.free = max(free - self.used_here, _ZERO)

    def walk(self) -> Iterable[Domain]:
        """This domain and every domain under it, depth first, in name order."""
        yield self
        for child in self.children.values():
            yield from child.walk()


class TopologyTree:
    """Nodes grouped by ``levels`` (broadest first; a trailing ``kubernetes.io/hostname`` is the
    host itself). A node without a level's label sits in the domain ``""`` of that level.
    ``tolerations``: the ResourceFlavors' (Kueue adds them to the pods it admits); a node with a
    ``NoSchedule``/``NoExecute`` taint none of them tolerates offers nothing free."""

    def __init__(
        self,
        nodes: Sequence[Mapping[str, Any]],
        levels: Sequence[str],
        resource: str,
        tolerations: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        self.levels = [level for level in levels if level != HOSTNAME_LABEL]
        self.resource = resource
        self.root = Domain("", "", -1)
        self.hosts: dict[str, Host] = {}
        self.unmatched_pods: list[str] = []
        self.unmatched_assignments: list[str] = []
        for obj in nodes:
            metadata = _map(obj.get("metadata"))
            labels = {str(k): str(v) for k, v in _map(metadata.get("labels")).items()}
            ready, cordoned, schedulable = node_state(obj)
            allocatable = _map(_map(obj.get("status")).get("allocatable")).get(resource)
            host = Host(
                name=str(metadata.get("name", "")),
                labels=labels,
                path=tuple(labels.get(level, "") for level in self.levels),
                allocatable=_quantity(allocatable) if allocatable is not None else _ZERO,
                ready=ready,
                cordoned=cordoned,
                schedulable=schedulable,
                taints=untolerated_taints(obj, tolerations),
            )
            path = host.path
            self.hosts[host.name] = host
            domain = self.root
            for depth, value in enumerate(path):
                child = domain.children.get(value)
                if child is None:
                    child = domain.children[value] = Domain(self.levels[depth], value, depth)
                domain = child
            domain.hosts.append(host)
        self._by_hostname = {h.labels.get(HOSTNAME_LABEL, h.name): h for h in self.hosts.values()}
        self.root.total()

    def add_pods(self, pods: Iterable[Mapping[str, Any]], skip_tas_pods: bool = False) -> int:
        """Count the requests of bound, not terminated pods on their nodes; pods bound to a node
        not in the tree go to ``unmatched_pods``. With ``skip_tas_pods``, TAS pods are left to
        their Workloads (Kueue's view). Returns the number of pods counted."""
        counted = 0
        for pod in pods:
            spec, metadata = _map(pod.get("spec")), _map(pod.get("metadata"))
            node_name = spec.get("nodeName")
            if not node_name or _map(pod.get("status")).get("phase") in ("Succeeded", "Failed"):
                continue
            if skip_tas_pods and any(a in _map(metadata.get("annotations")) for a in TAS_POD_ANNOTATIONS):
                continue
            host = self.hosts.get(str(node_name))
            if host is None:
                self.unmatched_pods.append(f"{metadata.get('namespace', '')}/{metadata.get('name', '')}")
                continue
            host.used += pod_requests(spec).get(self.resource, _ZERO)
            counted += 1
        self.root.total()
        return counted

    def add_workloads(self, workloads: Iterable[Mapping[str, Any]]) -> int:
        """Count the usage of Workloads holding quota (condition ``QuotaReserved``, not
        ``Finished``) where their ``topologyAssignment`` puts it: per-pod usage
        (``resourceUsage / count`` of the podset assignment) times the pods of each domain.
        Returns the number of Workloads counted."""
        counted = 0
        for workload in workloads:
            status = _map(workload.get("status"))
            conditions = {_map(c).get("type"): _map(c).get("status") for c in _list(status.get("conditions"))}
            if conditions.get("QuotaReserved") != "True" or conditions.get("Finished") == "True":
                continue
            metadata = _map(workload.get("metadata"))
            name = f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"
            used = False
            for assignment in _list(_map(status.get("admission")).get("podSetAssignments")):
                topology = _map(_map(assignment).get("topologyAssignment"))
                count = _map(assignment).get("count")
                usage = _map(_map(assignment).get("resourceUsage")).get(self.resource)
                if not topology or usage is None or not isinstance(count, int) or count <= 0:
                    continue
                try:
                    per_pod = parse_quantity(usage) / count
                    domains = assignment_domains(topology)
                except (QuantityError, TypeError, ValueError, KeyError) as exc:
                    self.unmatched_assignments.append(f"{name}: unreadable topologyAssignment ({exc})")
                    continue
                for levels, values, pods in domains:
                    self._assign(levels, values, per_pod * pods, name)
                used = True
            counted += used
        self.root.total()
        return counted

    def _assign(self, levels: Sequence[str], values: Sequence[str], amount: Decimal, workload: str) -> None:
        if levels and levels[-1] == HOSTNAME_LABEL:
            host = self._by_hostname.get(values[-1])
            if host is not None:
                host.used += amount
                return
        wanted = dict(zip(levels, values, strict=True))
        paths = [h.path for h in self.hosts.values() if all(h.labels.get(k) == v for k, v in wanted.items())]
        if not paths:
            self.unmatched_assignments.append(f"{workload}: no node has {wanted}")
            return
        domain = self.root
        for depth in range(len(self.levels)):
            value = paths[0][depth]
            if any(p[depth] != value for p in paths):
                break
            domain = domain.children[value]
        if len(paths) == 1 and not domain.children and len(domain.hosts) == 1:
            domain.hosts[0].used += amount
        else:
            domain.used_here += amount


def assignment_domains(assignment: Mapping[str, Any]) -> list[tuple[list[str], list[str], int]]:
    """A Workload podset's ``topologyAssignment`` as ``(levels, values, pods)`` per domain.

    Reads v1beta2's compressed form (``slices`` of ``domainCount`` domains, each level's values
    ``universal`` or ``individual`` ``prefix + root + suffix``, pod counts ``universal`` or
    ``individual``; ``apis/kueue/v1beta2/workload_types.go``) and v1beta1's ``domains`` list.

    Raises:
        ValueError, KeyError, TypeError: the assignment does not have that shape.
    """
    levels = [str(level) for level in assignment["levels"]]
    out: list[tuple[list[str], list[str], int]] = []
    if "domains" in assignment:
        for domain in assignment["domains"]:
            out.append((levels, [str(v) for v in domain["values"]], int(domain["count"])))
        return out
    for piece in assignment.get("slices") or []:
        count = int(piece["domainCount"])
        columns: list[list[str]] = []
        for level_values in piece["valuesPerLevel"]:
            if "universal" in level_values:
                columns.append([str(level_values["universal"])] * count)
            else:
                individual = level_values["individual"]
                prefix, suffix = individual.get("prefix") or "", individual.get("suffix") or ""
                columns.append([f"{prefix}{root}{suffix}" for root in individual["roots"]])
        counts = piece["podCounts"]
        pods = [int(counts["universal"])] * count if "universal" in counts else [int(p) for p in counts["individual"]]
        if len(columns) != len(levels) or any(len(c) != count for c in columns) or len(pods) != count:
            raise ValueError(f"a slice of {count} domains has values or pod counts of another length")
        for index in range(count):
            out.append((levels, [column[index] for column in columns], pods[index]))
    return out
