"""Workloads of every kind in the kinds table, built from the table's own rows (no outside files).

For a :class:`~webhook.core.kueue.kinds.WorkloadKind` row, :func:`build` makes an object of its
``apiVersion`` and ``kind`` with a pod template wherever a podset rule points, a count at every
count factor, and the row's other fields (leader template, ``only_if`` field, ``suspend``, the fields
Kueue's webhook requires, AppWrapper components built the same way). A wildcard is a map keyed by
role where the rule names podsets by their map key (``name="role"``, Kubeflow), else a list whose
items carry the name field (JobSet ``name``, Ray ``groupName``). A new row is covered at once; a row
of a shape this builder does not know fails :func:`build` loudly.

``pick(options)`` chooses among options: :func:`first` for the fixed examples, a hypothesis draw in
the property and fuzz generators, so every choice below is explored there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from webhook.core.kueue.kind_model import SPARK_ROLE, PodSetRule, WorkloadKind
from webhook.core.kueue.kinds import KINDS
from webhook.core.kueue.view import kueue_view
from webhook.core.objects.paths import PathPattern

T = TypeVar("T")
Pick = Callable[[Sequence[Any]], Any]

GPU = "nvidia.com/gpu"
ROLES: list[list[str]] = [["Master", "Worker"], ["Worker"], ["Launcher", "Worker"]]


def first(options: Sequence[T]) -> T:
    return options[0]


def api_version(row: WorkloadKind) -> str:
    return f"{row.group}/{row.versions[0]}" if row.group else row.versions[0]


def container(pick: Pick, name: str = "main") -> dict[str, Any]:
    requests = pick([{GPU: "8", "cpu": "16"}, {GPU: "1"}, {"cpu": "500m", "memory": "1Gi"}, {}])
    resources = pick([{"requests": requests}, {"limits": requests}, {}]) if requests else {}
    out: dict[str, Any] = {"name": name, "image": "busybox"}
    if resources:
        out["resources"] = resources
    return out


def pod_spec(pick: Pick) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [container(pick)]}
    init = pick([None, "plain", "sidecar"])
    if init is not None:
        first_init = container(pick, "init")
        if init == "sidecar":
            first_init["restartPolicy"] = "Always"
        spec["initContainers"] = [first_init]
    return spec


def pod_template(pick: Pick, rule: PodSetRule) -> dict[str, Any]:
    """A podset's base: a ``PodTemplateSpec``, or a Spark role's own fields."""
    if rule.layout == SPARK_ROLE:
        role: dict[str, Any] = {"cores": pick([1, 4]), "memory": "512m"}
        if pick([False, True]):
            role["labels"] = {"app": "spark"}
        return role
    template: dict[str, Any] = {"spec": pod_spec(pick)}
    metadata = pick([None, {"labels": {"app": "train"}}, {"annotations": {"example.com/owner": "ml"}}])
    if metadata is not None:
        template["metadata"] = metadata
    return template


def put(obj: dict[str, Any], path: PathPattern | tuple[Any, ...], value: Any) -> None:
    """Set ``value`` at ``path`` (map keys only), making the maps on the way."""
    if not path:  # the object itself (a bare Pod): merge its maps
        for key, part in value.items():
            if isinstance(part, dict) and isinstance(obj.get(key), dict):
                obj[key].update(part)
            else:
                obj[key] = part
        return
    node = obj
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value


def _count_value(path: PathPattern, pick: Pick) -> Any:
    value = pick([2, 1, 3, 4])
    return str(value) if "annotations" in path or "labels" in path else value


def _place(obj: dict[str, Any], rule: PodSetRule, pick: Pick) -> None:
    """Put one rule's templates and counts into ``obj``."""
    if rule.template.count("*") > 1:
        raise NotImplementedError(f"a podset template under {rule.template} (more than one '*') is new to this builder")
    if "*" not in rule.template:
        put(obj, rule.template, pod_template(pick, rule))
        for factor in rule.count:
            for path in (factor.path, factor.cap):
                if path is not None and "*" not in path:
                    put(obj, path, _count_value(path, pick))
        return
    star = rule.template.index("*")
    prefix, suffix = rule.template[:star], rule.template[star + 1 :]
    by_role = rule.name == "role"  # podsets named by the wildcard's map key (kind_model.PodSetRule)
    keys: list[Any] = list(pick(ROLES)) if by_role else list(range(pick([1, 2, 3])))
    items: dict[str, Any] | list[Any] = {} if by_role else []
    for key in keys:
        item: dict[str, Any] = {} if by_role else {rule.name: f"group-{key}"}
        put(item, suffix, pod_template(pick, rule))
        for factor in rule.count:
            for path in (factor.path, factor.cap):
                if path is not None and path[:star] == prefix and path[star : star + 1] == ("*",):
                    put(item, path[star + 1 :], _count_value(path, pick))
        if isinstance(items, dict):
            items[key] = item
        else:
            items.append(item)
    put(obj, prefix, items)


def build(row: WorkloadKind, pick: Pick = first, name: str | None = None) -> dict[str, Any]:
    """An object of ``row``'s kind (its first API version) holding every podset the row describes."""
    obj: dict[str, Any] = {"apiVersion": api_version(row), "kind": row.kind, "metadata": {"name": name or "w"}}
    if row.runtime is not None:  # its podsets come from the runtime (tests/test_trainjob.py)
        put(obj, ("spec", "runtimeRef"), {"name": "torch-distributed"})
        return obj
    leaders = {rule.leader.path for rule in row.podsets if rule.leader is not None}
    for rule in row.podsets:
        if rule.template in leaders and not pick([True, False]):
            continue  # an optional leader template (LWS leaderTemplate)
        if rule.only_if is not None:
            if not pick([True, False]):
                continue
            put(obj, rule.only_if[0], rule.only_if[1])
        if rule.partial_if and pick([False, True]):
            put(obj, pick(list(rule.partial_if)), "group-a")
        elif rule.partial_if:
            put(obj, rule.template, pod_template(pick, rule))
            continue  # counts only mean something in a group (Pod group total count)
        _place(obj, rule, pick)
    if row.embedded is not None:
        _embed(obj, row, pick)
    if row.suspend is not None:
        suspend = pick([None, False, True])
        if suspend is not None:
            put(obj, row.suspend, suspend)
    for requirement in row.requires:
        if not requirement.forbid and pick([False, True]):
            put(obj, requirement.path, requirement.value)
    return obj


#: Rows an AppWrapper component may hold (kinds with pod templates of their own).
def _component_rows() -> list[WorkloadKind]:
    return [r for r in KINDS if r.podsets and r.embedded is None and r.kind in ("Job", "PyTorchJob", "JobSet")]


def _embed(obj: dict[str, Any], row: WorkloadKind, pick: Pick) -> None:
    """AppWrapper components: whole objects of other rows, with or without declared podsets."""
    assert row.embedded is not None
    star = row.embedded.index("*")
    prefix, suffix = row.embedded[:star], row.embedded[star + 1 :]
    components = []
    for index in range(pick([1, 2])):
        inner_row = pick(_component_rows())
        inner = build(inner_row, pick, name=f"part-{index}")
        component: dict[str, Any] = {}
        put(component, suffix, inner)
        if row.declared and pick([False, True]):
            component[row.declared] = [
                {"path": _aw_path((*suffix, *podset.path)), "replicas": podset.count}
                for podset in kueue_view(inner, inner_row).podsets
            ]
        components.append(component)
    put(obj, prefix, components)


def _aw_path(path: tuple[Any, ...]) -> str:
    """``("template", "spec", "replicatedJobs", 0, "template")`` → ``template.spec.replicatedJobs[0].template``."""
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out


def examples() -> list[dict[str, Any]]:
    """One fixed workload of every kind in the kinds table, in table order."""
    return [build(row, first, name=row.kind.lower()) for row in KINDS]
