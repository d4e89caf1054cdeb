"""Text renderings of a :class:`~webhook.topology.tree.TopologyTree`: table, tree and JSON.

Every rendering shows, per domain (broadest level first) and per host: the node count, how many
nodes take no new pods (NotReady, cordoned, tainted), and the accelerator resource's
allocatable and free amounts (SPEC §9).
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from webhook.topology.tree import Domain, Host, TopologyTree

__all__ = ["level_name", "number", "render_json", "render_table", "render_tree", "tree_document"]


def number(value: Decimal) -> str:
    """``8`` for an integral amount, else the decimal (``0.5``)."""
    return str(int(value)) if value == value.to_integral_value() else format(value.normalize(), "f")


def level_name(level: str) -> str:
    """A node label key shortened for display: ``topology.k8s.aws/network-node-layer-1`` →
    ``layer-1``, other keys → the part after the last ``/``."""
    name = level.rsplit("/", 1)[-1]
    return name.removeprefix("network-node-")


def _value(domain: Domain) -> str:
    return domain.value or f"(no {domain.level})"


def _summary(tree: TopologyTree) -> str:
    """Two comment lines: totals, then the levels (node label keys)."""
    root = tree.root
    unavailable = f", {root.unavailable} taking no new pods" if root.unavailable else ""
    return (
        f"# {root.nodes} node{'s' * (root.nodes != 1)}{unavailable}; {tree.resource}: "
        f"{number(root.allocatable)} allocatable, {number(root.free)} free\n"
        f"# levels: {' > '.join([*tree.levels, 'host'])}"
    )


def _rows(tree: TopologyTree) -> list[tuple[str, str, str, str, str, str, str]]:
    rows = []

    def visit(domain: Domain) -> None:
        indent = "  " * domain.depth
        rows.append(
            (
                level_name(domain.level),
                indent + _value(domain),
                str(domain.nodes),
                str(domain.unavailable),
                number(domain.allocatable),
                number(domain.free),
                "",
            )
        )
        for child in domain.children.values():
            visit(child)
        host_indent = "  " * (domain.depth + 1)
        for host in domain.hosts:
            rows.append(
                (
                    "host",
                    host_indent + host.name,
                    "1",
                    str(int(not host.available)),
                    number(host.allocatable),
                    number(host.free),
                    ",".join(host.marks),
                )
            )

    for child in tree.root.children.values():
        visit(child)
    if not tree.levels:  # hostname only: the hosts hang from the root
        for host in tree.root.hosts:
            marks = ",".join(host.marks)
            used = str(int(not host.available))
            rows.append(("host", host.name, "1", used, number(host.allocatable), number(host.free), marks))
    return rows


def render_table(tree: TopologyTree) -> str:
    """One row per domain and per host, indented by depth, with a header line of totals."""
    header = ("LEVEL", "DOMAIN", "NODES", "UNAVAILABLE", "ALLOCATABLE", "FREE", "STATUS")
    rows = _rows(tree)
    widths = [max(len(header[i]), *(len(row[i]) for row in rows)) if rows else len(header[i]) for i in range(7)]
    aligns = "<<>>>>"
    template = "  ".join(f"{{:{align}{width}}}" for align, width in zip(aligns, widths, strict=False)) + "  {}"
    lines = [_summary(tree), template.format(*header).rstrip()]
    lines += [template.format(*row).rstrip() for row in rows]
    return "\n".join(lines) + "\n"


def _line(name: str, nodes: int, unavailable: int, allocatable: Decimal, free: Decimal, extra: str = "") -> str:
    count = f"{nodes} node{'s' if nodes != 1 else ''}"
    down = f", {unavailable} unavailable" if unavailable else ""
    return f"{name}  {count}{down}  {number(free)}/{number(allocatable)} free{extra}"


def render_tree(tree: TopologyTree) -> str:
    """A box-drawing tree: ``domain (level)  N nodes  free/allocatable free``, hosts at the
    leaves with their marks in brackets."""
    root = tree.root
    lines = [
        _summary(tree),
        _line(f"cluster ({tree.resource})", root.nodes, root.unavailable, root.allocatable, root.free),
    ]

    def host_line(host: Host) -> str:
        marks = f"  [{', '.join(host.marks)}]" if host.marks else ""
        return f"{host.name}  {number(host.free)}/{number(host.allocatable)} free{marks}"

    def visit(domain: Domain, prefix: str) -> None:
        entries: list[Domain | Host] = [*domain.children.values(), *domain.hosts]
        for index, entry in enumerate(entries):
            last = index == len(entries) - 1
            branch, deeper = ("└── ", "    ") if last else ("├── ", "│   ")
            if isinstance(entry, Host):
                lines.append(prefix + branch + host_line(entry))
                continue
            label = f"{_value(entry)} ({level_name(entry.level)})"
            lines.append(prefix + branch + _line(label, entry.nodes, entry.unavailable, entry.allocatable, entry.free))
            visit(entry, prefix + deeper)

    visit(root, "")
    return "\n".join(lines) + "\n"


def tree_document(tree: TopologyTree) -> dict[str, Any]:
    """The tree as JSON-ready data: ``{resource, levels, nodes, unavailable, allocatable, free,
    domains: [{level, name, nodes, unavailable, allocatable, free, domains | hosts}]}``; amounts
    are numbers (int when integral), hosts ``{name, allocatable, free, used, ready, cordoned,
    schedulable, taints}`` (``taints``: those no ResourceFlavor tolerates, ``key=value:Effect``);
    plus the pods and assignments that matched no node."""

    def amount(value: Decimal) -> int | float:
        return int(value) if value == value.to_integral_value() else float(value)

    def host(h: Host) -> dict[str, Any]:
        return {
            "name": h.name,
            "allocatable": amount(h.allocatable),
            "used": amount(h.used),
            "free": amount(h.free),
            "ready": h.ready,
            "cordoned": h.cordoned,
            "schedulable": h.schedulable,
            "taints": list(h.taints),
        }

    def domain(d: Domain) -> dict[str, Any]:
        out: dict[str, Any] = {
            "level": d.level,
            "name": d.value,
            "nodes": d.nodes,
            "unavailable": d.unavailable,
            "allocatable": amount(d.allocatable),
            "free": amount(d.free),
        }
        if d.children:
            out["domains"] = [domain(c) for c in d.children.values()]
        if d.hosts:
            out["hosts"] = [host(h) for h in d.hosts]
        return out

    root = tree.root
    document: dict[str, Any] = {
        "resource": tree.resource,
        "levels": tree.levels,
        "nodes": root.nodes,
        "unavailable": root.unavailable,
        "allocatable": amount(root.allocatable),
        "free": amount(root.free),
        "domains": [domain(c) for c in root.children.values()],
    }
    if root.hosts:
        document["hosts"] = [host(h) for h in root.hosts]
    if tree.unmatched_pods:
        document["podsOnUnknownNodes"] = tree.unmatched_pods
    if tree.unmatched_assignments:
        document["unmatchedAssignments"] = tree.unmatched_assignments
    return document


def render_json(tree: TopologyTree) -> str:
    """:func:`tree_document` as indented JSON."""
    return json.dumps(tree_document(tree), indent=2) + "\n"
