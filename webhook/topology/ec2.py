"""Node labels from EC2 ``DescribeInstanceTopology`` output (SPEC §9).

Input is what ``aws ec2 describe-instance-topology`` prints: ``{"Instances": [{"InstanceId",
"InstanceType", "NetworkNodes": [broadest, …, narrowest], "AvailabilityZone", "ZoneId", …}],
"NextToken"}``; several pages may be given as a JSON array of such objects. Instances report 3
network nodes, or 4 on the instance types with an extra layer (p6-b200); an instance that is not
running or of an unsupported type reports none (EC2 API reference, ``InstanceTopology``).

Network node *i* (1-based, broadest first) becomes the node label
``topology.k8s.aws/network-node-layer-i``, the labels EKS and SageMaker HyperPod set themselves.
Nodes are matched by the instance id in ``spec.providerID`` (``aws:///<zone>/<instance id>``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "LAYER_LABEL",
    "InstanceTopology",
    "LabelPlan",
    "TopologyDocumentError",
    "instance_id_of",
    "kubectl_commands",
    "parse_instance_topology",
    "plan_labels",
]

LAYER_LABEL = "topology.k8s.aws/network-node-layer-{}"
LAYER_COUNTS = (3, 4)
MAX_LAYERS = 4
_INSTANCE_ID = re.compile(r"^i-[0-9a-f]{8,32}$")
_PROVIDER_ID = re.compile(r"^aws://(?:/[^/]*)?/(i-[0-9a-f]{8,32})$")
# A label value (Kubernetes: at most 63 characters, alphanumeric at both ends, - _ . inside).
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")


class TopologyDocumentError(ValueError):
    """The document is not DescribeInstanceTopology output; the message says where and why."""


@dataclass(frozen=True)
class InstanceTopology:
    """One instance: its id, type and network nodes (broadest first; empty: EC2 gave none)."""

    instance_id: str
    instance_type: str
    network_nodes: tuple[str, ...]

    def labels(self) -> dict[str, str]:
        """``topology.k8s.aws/network-node-layer-i`` → network node *i*."""
        return {LAYER_LABEL.format(i): node for i, node in enumerate(self.network_nodes, start=1)}


def parse_instance_topology(document: Any, source: str = "input") -> list[InstanceTopology]:
    """The instances of one DescribeInstanceTopology response, or of a JSON array of pages.

    Raises:
        TopologyDocumentError: not an object with an ``Instances`` list; an instance without a
            string ``InstanceId`` of the form ``i-<hex>``; ``NetworkNodes`` not a list of label
            values, or of a length other than 3 or 4; one instance listed twice with different
            network nodes; an empty array of pages; a last page with a non-empty ``NextToken``
            (the later pages are missing); no instance on any page (an empty ``Instances``: nothing
            to label, and every node would be listed as having no instance). The message names
            ``source`` and the JSON path.
    """
    pages = document if isinstance(document, list) else [document]
    if not pages:
        raise TopologyDocumentError(
            f"{source}: an empty array; expected `aws ec2 describe-instance-topology` output "
            f"(an object with an Instances list, or an array of such pages)"
        )
    seen: dict[str, InstanceTopology] = {}
    for page_index, page in enumerate(pages):
        where = f"{source}: [{page_index}]" if isinstance(document, list) else source
        if not isinstance(page, dict) or not isinstance(page.get("Instances"), list):
            raise TopologyDocumentError(
                f"{where}: expected `aws ec2 describe-instance-topology` output, an object with an Instances list"
            )
        for index, item in enumerate(page["Instances"]):
            instance = _instance(item, f"{where}: Instances[{index}]")
            earlier = seen.get(instance.instance_id)
            if earlier is not None and earlier.network_nodes != instance.network_nodes:
                raise TopologyDocumentError(
                    f"{where}: Instances[{index}]: {instance.instance_id} is listed twice with different NetworkNodes"
                )
            seen[instance.instance_id] = instance
    last = pages[-1]
    if last.get("NextToken"):
        where = f"{source}: [{len(pages) - 1}]" if isinstance(document, list) else source
        raise TopologyDocumentError(
            f"{where}: NextToken is set, so this is one page of an incomplete result and nodes on the "
            f"later pages would be reported as having no instance; pass all pages (a JSON array of the "
            f"pages, or the output of `aws ec2 describe-instance-topology` with its automatic pagination, "
            f"not --no-paginate or --max-items)"
        )
    if not seen:
        raise TopologyDocumentError(
            f"{source}: no instances (Instances is empty{' on every page' if len(pages) > 1 else ''}), so "
            "nothing to label; expected `aws ec2 describe-instance-topology` output listing the cluster's "
            "instances (run in the cluster's region)"
        )
    return list(seen.values())


def _instance(item: Any, where: str) -> InstanceTopology:
    if not isinstance(item, dict):
        raise TopologyDocumentError(f"{where}: not an object")
    instance_id = item.get("InstanceId")
    if not isinstance(instance_id, str):
        raise TopologyDocumentError(f"{where}: no InstanceId (a string such as i-0123456789abcdef0)")
    if not _INSTANCE_ID.match(instance_id):
        raise TopologyDocumentError(f"{where}: InstanceId {instance_id!r} is not an instance id (i-<hex>)")
    nodes = item.get("NetworkNodes")
    if nodes is None:
        nodes = []
    if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
        raise TopologyDocumentError(f"{where}: NetworkNodes of {instance_id} is not a list of strings")
    if nodes and len(nodes) not in LAYER_COUNTS:
        raise TopologyDocumentError(
            f"{where}: {instance_id} has {len(nodes)} NetworkNodes; EC2 reports 3 or 4 (broadest first)"
        )
    for node in nodes:
        if not _LABEL_VALUE.match(node):
            raise TopologyDocumentError(
                f"{where}: network node {node!r} of {instance_id} cannot be a label value "
                f"(at most 63 characters: letters, digits, '-', '_', '.')"
            )
    instance_type = item.get("InstanceType")
    return InstanceTopology(instance_id, instance_type if isinstance(instance_type, str) else "", tuple(nodes))


def instance_id_of(provider_id: Any) -> str | None:
    """The instance id of an AWS ``spec.providerID`` (``aws:///us-west-2a/i-0abc…``), else None."""
    if not isinstance(provider_id, str):
        return None
    found = _PROVIDER_ID.match(provider_id)
    return found.group(1) if found else None


@dataclass
class LabelChange:
    """Labels to set on one node (``None``: remove a layer label the instance no longer has)."""

    node: str
    instance_id: str
    labels: dict[str, str | None]


@dataclass
class LabelPlan:
    """What labelling would do: ``changes`` per node; ``unchanged`` nodes already labelled;
    ``instances_without_node`` and ``nodes_without_instance`` (no AWS providerID, or an instance
    not in the document); ``instances_without_topology`` (EC2 gave no network nodes)."""

    changes: list[LabelChange] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    instances_without_node: list[str] = field(default_factory=list)
    nodes_without_instance: list[str] = field(default_factory=list)
    instances_without_topology: list[str] = field(default_factory=list)


def plan_labels(instances: Iterable[InstanceTopology], nodes: Iterable[Mapping[str, Any]]) -> LabelPlan:
    """Match ``nodes`` (core/v1 Node objects) to ``instances`` by instance id and list the label
    changes, in node name order."""
    plan = LabelPlan()
    by_id = {instance.instance_id: instance for instance in instances}
    matched: set[str] = set()
    for node in sorted(nodes, key=lambda n: str((n.get("metadata") or {}).get("name", ""))):
        metadata = node.get("metadata") if isinstance(node.get("metadata"), Mapping) else {}
        assert isinstance(metadata, Mapping)
        name = str(metadata.get("name", ""))
        spec = node.get("spec") if isinstance(node.get("spec"), Mapping) else {}
        assert isinstance(spec, Mapping)
        instance_id = instance_id_of(spec.get("providerID"))
        instance = by_id.get(instance_id) if instance_id else None
        if instance is None:
            plan.nodes_without_instance.append(name)
            continue
        matched.add(instance.instance_id)
        if not instance.network_nodes:
            plan.instances_without_topology.append(instance.instance_id)
            continue
        current = metadata.get("labels") if isinstance(metadata.get("labels"), Mapping) else {}
        assert isinstance(current, Mapping)
        wanted: dict[str, str | None] = dict(instance.labels())
        for layer in range(len(instance.network_nodes) + 1, MAX_LAYERS + 1):
            if LAYER_LABEL.format(layer) in current:
                wanted[LAYER_LABEL.format(layer)] = None
        changes = {key: value for key, value in wanted.items() if current.get(key) != value}
        if changes:
            plan.changes.append(LabelChange(name, instance.instance_id, changes))
        else:
            plan.unchanged.append(name)
    plan.instances_without_node = sorted(set(by_id) - matched)
    return plan


def kubectl_commands(plan: LabelPlan) -> list[str]:
    """One ``kubectl label node NAME k=v … --overwrite`` per changed node (``k-`` removes)."""
    out = []
    for change in plan.changes:
        pairs = [f"{key}={value}" if value is not None else f"{key}-" for key, value in sorted(change.labels.items())]
        out.append(shlex.join(["kubectl", "label", "node", change.node, *pairs, "--overwrite"]))
    return out
