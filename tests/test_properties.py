"""Property-based tests (hypothesis) of the SPEC §3 invariants over generated workloads and policies.

- the patch applies cleanly to the original object (RFC 6902, jsonpatch);
- idempotent: the webhook on its own output yields no patch;
- additive: no user field is removed or rewritten (the one rewrite: suspend false → true when we add
  the queue label);
- at most one of the required/preferred/unconstrained TAS annotations per pod template.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import CASES, aws_nodes, job, load_documents, platform_with, review_body, strip_kueue, teams_from
from workloads import build, examples

from webhook.core.admission.review import review
from webhook.core.kueue.kinds import KINDS, find_kind
from webhook.core.kueue.view import kueue_view
from webhook.core.objects.paths import lookup
from webhook.core.plan.patch import apply_patch

#: The project's own workloads: a Job, then one of every kind in the kinds table (tests/workloads.py);
#: Kueue's examples (the shared cases) are added when present, never needed for breadth.
BASES: list[dict[str, Any]] = [job(), *examples()]
if CASES.is_dir():
    for path in sorted(CASES.glob("**/*.yaml")):
        BASES.extend(d for d in load_documents(path) if find_kind(str(d.get("apiVersion", "")), str(d.get("kind", ""))))

LEVELS = [
    "topology.k8s.aws/network-node-layer-1",
    "topology.k8s.aws/network-node-layer-2",
    "topology.k8s.aws/network-node-layer-3",
    "kubernetes.io/hostname",
]
KEY = st.text(alphabet="ab/~.-", min_size=1, max_size=6)


def _leaves_the_flavor(expression: dict[str, Any]) -> dict[str, Any]:
    """An affinity on the flavor's own label keeps its value: one that contradicts every flavor of
    the team strands the team, and the platform is refused (webhook/core/platform/affinity.py)."""
    if expression["key"] == "node.kubernetes.io/instance-type" and "p5.48xlarge" not in expression["values"]:
        return {**expression, "values": [*expression["values"], "p5.48xlarge"]}
    return expression


EXPRESSION = st.fixed_dictionaries(
    {
        "key": st.sampled_from(["zone", "node.kubernetes.io/instance-type", "example.com/rack"]),
        "operator": st.just("In"),
        "values": st.lists(st.sampled_from(["x", "y", "p5.48xlarge"]), min_size=1, max_size=2, unique=True),
    }
).map(_leaves_the_flavor)
ENFORCEMENT = st.sampled_from(["default", "enforce", "warn"])


@st.composite
def policies(draw: st.DrawFn) -> dict[str, Any]:
    mode = draw(st.sampled_from(["required", "preferred", "unconstrained", "auto", "none"]))
    topology: dict[str, Any] = {"mode": mode, "enforcement": draw(ENFORCEMENT)}
    if mode in ("required", "preferred") or (mode == "auto" and draw(st.booleans())):
        topology["level"] = draw(st.sampled_from(LEVELS))
    if mode == "auto" and draw(st.booleans()):
        topology["autoConstraint"] = draw(st.sampled_from(["required", "preferred"]))
    if mode == "required" and draw(st.booleans()):
        topology["level"] = LEVELS[1]
        topology.update(sliceLevel=LEVELS[2], sliceSize=draw(st.integers(1, 4)))
    policy: dict[str, Any] = {
        "queue": {"enforcement": draw(ENFORCEMENT)},
        "topology": topology,
        "nodeAffinity": draw(st.lists(EXPRESSION, max_size=2, unique_by=lambda e: e["key"])),
    }
    for rule in ("kueuePriority", "podPriority"):
        if draw(st.booleans()):
            policy[rule] = {"default": "low", "allowed": ["low"], "enforcement": draw(ENFORCEMENT)}
    return policy


@st.composite
def kind_workloads(draw: st.DrawFn) -> dict[str, Any]:
    """A workload of any kind in the kinds table, every choice of its builder drawn."""
    row = draw(st.sampled_from(KINDS))
    return build(row, lambda options: draw(st.sampled_from(list(options))), name=draw(st.sampled_from(["w", "x-1"])))


@st.composite
def workloads(draw: st.DrawFn) -> dict[str, Any]:
    obj = copy.deepcopy(draw(st.sampled_from(BASES))) if draw(st.booleans()) else draw(kind_workloads())
    if draw(st.booleans()):
        obj = strip_kueue(obj)
    metadata = obj.setdefault("metadata", {})
    metadata.pop("namespace", None)
    if draw(st.booleans()):
        metadata.setdefault("labels", {}).update(draw(st.dictionaries(KEY, KEY, max_size=3)))
    row = find_kind(obj["apiVersion"], obj["kind"])
    assert row is not None
    if row.suspend is not None and draw(st.booleans()):
        parent = lookup(obj, row.suspend[:-1])
        if isinstance(parent, dict):
            parent[row.suspend[-1]] = draw(st.booleans())
    for ref in list(kueue_view(obj, row).podsets):
        template: Any = ref.base
        if draw(st.booleans()):
            template.setdefault("metadata", {}).setdefault("annotations", {}).update(
                draw(st.dictionaries(KEY, KEY, max_size=2))
            )
        if draw(st.booleans()):
            terms = draw(
                st.lists(st.fixed_dictionaries({"matchExpressions": st.lists(EXPRESSION, max_size=2)}), max_size=3)
            )
            template.setdefault("spec", {}).setdefault("affinity", {})["nodeAffinity"] = {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
            }
    return obj


def _leaves(node: Any, path: tuple[Any, ...] = ()) -> set[tuple[tuple[Any, ...], str]]:
    if isinstance(node, dict) and node:
        return {leaf for key, value in node.items() for leaf in _leaves(value, (*path, key))}
    if isinstance(node, list) and node:
        return {leaf for index, value in enumerate(node) for leaf in _leaves(value, (*path, index))}
    return {(path, repr(node))}


TAS_MODES = (
    "kueue.x-k8s.io/podset-required-topology",
    "kueue.x-k8s.io/podset-preferred-topology",
    "kueue.x-k8s.io/podset-unconstrained-topology",
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=workloads(), policy=policies(), with_nodes=st.booleans(), dry_run=st.booleans())
def test_invariants(obj: dict[str, Any], policy: dict[str, Any], with_nodes: bool, dry_run: bool) -> None:
    teams = teams_from(platform_with(policy))
    inventory = aws_nodes() if with_nodes else None
    original = copy.deepcopy(obj)
    outcome = review(review_body(obj, "ml", dry_run=dry_run), teams, inventory=inventory)
    assert obj == original, "the review must not modify its input"
    if not outcome.plan.allowed:
        assert outcome.patch == [] and "patch" not in outcome.response["response"]
        return
    patched = apply_patch(obj, outcome.patch)

    row = find_kind(obj["apiVersion"], obj["kind"])
    assert row is not None
    for op in outcome.patch:
        assert op["op"] in ("add", "replace")
        if op["op"] == "replace":
            assert row.suspend is not None and op["value"] is True
    removed = _leaves(original) - _leaves(patched)
    allowed_removed = {(row.suspend, "False")} if row.suspend else set()
    # An empty map/list the user wrote may be filled in: that is an addition, not a removal.
    removed = {(path, value) for path, value in removed if value not in ("{}", "[]", "None")}
    assert removed <= allowed_removed, removed

    for ref in kueue_view(patched, row).podsets:
        annotations = (ref.base.get("metadata") or {}).get("annotations") or {}
        before = lookup(original, (*ref.path, "metadata", "annotations")) or {}
        if sum(key in before for key in TAS_MODES) <= 1:
            assert sum(key in annotations for key in TAS_MODES) <= 1, annotations

    # A podset group topology mode auto makes is one Kueue v0.19.2 accepts (exactly 2 podsets, one
    # of 1 pod, the same level on both, no slices); a level it requires is never stranded.
    podsets = kueue_view(patched, row).podsets
    before = {p.group for p in kueue_view(original, row).podsets}
    for name in {p.group for p in podsets} - before:
        members = [p for p in podsets if p.group == name]
        assert len(members) == 2 and min(p.count for p in members) == 1, name
        assert members[0].annotations.get(TAS_MODES[0]) == members[1].annotations.get(TAS_MODES[0])
        assert members[0].annotations.get(TAS_MODES[1]) == members[1].annotations.get(TAS_MODES[1])
        assert not any("kueue.x-k8s.io/podset-slice-size" in p.annotations for p in members)
    if policy["topology"]["mode"] == "auto":
        reports = [*outcome.plan.denials, *outcome.plan.warnings]
        placed = [p for p in kueue_view(original, row).podsets if any(k in p.annotations for k in TAS_MODES)]
        if not placed:
            assert not [r for r in reports if "must fit in one" in r], reports

    again = review(review_body(patched, "ml"), teams, inventory=inventory)
    assert again.plan.allowed
    assert again.patch == [], again.patch


def test_the_projects_own_workloads_cover_every_kind() -> None:
    """Breadth without outside files: one built workload per row, each with the podsets its row
    describes (sized, with at least one pod) and reviewed without a denial under a plain policy."""
    built = examples()
    assert [(w["apiVersion"], w["kind"]) for w in built] == [
        (f"{row.group}/{row.versions[0]}" if row.group else row.versions[0], row.kind) for row in KINDS
    ]
    teams = teams_from(platform_with({"queue": {}}))
    for obj, row in zip(built, KINDS, strict=True):
        assert find_kind(obj["apiVersion"], obj["kind"]) is row
        podsets = kueue_view(obj, row).podsets
        if row.runtime is not None:  # no runtime given: its pods are unknown
            assert not podsets, row.kind
        else:
            assert podsets and all(p.present and p.count >= 1 for p in podsets), (row.kind, podsets)
            sized = [p.requests is not None for p in podsets]
            assert all(sized) or row.kind == "SparkApplication", row.kind  # Spark sizes its pods itself
        outcome = review(review_body(obj, "ml"), teams)
        assert outcome.plan.allowed, (row.kind, outcome.plan.denials)
        patched = apply_patch(obj, outcome.patch)
        assert lookup(patched, (*row.labels_at, "labels", "kueue.x-k8s.io/queue-name")) == "ml-queue", row.kind
