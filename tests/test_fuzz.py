"""Arbitrary JSON where a workload's fields should be: the review answers, it never raises.

The API server does not type-check custom-resource bodies before mutating webhooks, so any JSON
value may sit where a map, a list or a quantity belongs. Whatever is there, the answer is an
AdmissionReview (allowed, patched or denied with the path), and a patch always applies.
Example counts scale with ``KGOV_FUZZ_SCALE`` (tests/fuzzing.py).
"""

from __future__ import annotations

import base64
import copy
import json
import re
from decimal import Decimal
from typing import Any

import pytest
from fuzzing import examples
from hypothesis import given
from hypothesis import strategies as st
from support import aws_nodes, platform_with, review_body, teams_from
from test_malformed import KINDS, QUANTITY_FIELDS, TEMPLATED, _schema_typed, answer, assert_admitted, with_value
from test_properties import BASES

from webhook.core.admission.envelope import MalformedReview, decode_body
from webhook.core.admission.review import review
from webhook.core.kueue.inventory import NodeInventory, PodConstraints
from webhook.core.kueue.wellformed import is_extended_resource
from webhook.core.objects.paths import dotted, lookup
from webhook.core.objects.quantity import format_quantity, parse_quantity
from webhook.core.plan.patch import apply_patch
from webhook.kube.files import load_nodes

# Bases whose every governed field is present, so that corruption reaches each of them.
_FULL_JOB = copy.deepcopy(BASES[0])
_FULL_JOB["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "ml-queue", "kueue.x-k8s.io/priority-class": "low"}
_FULL_JOB["spec"]["template"]["metadata"] = {
    "labels": {"app": "x"},
    "annotations": {"kueue.x-k8s.io/podset-required-topology": "kubernetes.io/hostname"},
}
_FULL_JOB["spec"]["template"]["spec"].update(
    priorityClassName="low",
    affinity={
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
            }
        }
    },
)
_FULL_DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "labels": {"kueue.x-k8s.io/queue-name": "ml-queue"}},
    "spec": {"replicas": 2, "template": copy.deepcopy(_FULL_JOB["spec"]["template"])},
}
FUZZ_BASES = [*BASES, _FULL_JOB, _FULL_DEPLOYMENT, *(build() for build, _, _ in KINDS.values())]


# Quantity-like strings that are valid or nearly so: extremes, exponents, non-ASCII digits.
ODD_NUMBERS = st.sampled_from(["1e-30", "1e400", "1E+9999", "\u00b2", "-1", "0", "8Gi", "0.0000001m", "99999999999999"])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5) | ODD_NUMBERS,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)
POLICY = {
    "queue": {"enforcement": "enforce"},
    "kueuePriority": {"default": "low", "allowed": ["low"]},
    "podPriority": {"default": "low", "allowed": ["low"], "enforcement": "warn"},
    "topology": {"mode": "auto", "enforcement": "enforce"},
    "nodeAffinity": [{"key": "zone", "operator": "In", "values": ["a"]}],
}
TEAMS = teams_from(platform_with(POLICY))
QUEUE = "kueue.x-k8s.io/queue-name"
NODES = aws_nodes()


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out.extend(_paths(value, (*prefix, key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out.extend(_paths(value, (*prefix, index)))
    return out


@st.composite
def corrupted(draw: st.DrawFn) -> dict[str, Any]:
    obj = copy.deepcopy(draw(st.sampled_from(FUZZ_BASES)))
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(obj) if p and p[0] not in ("apiVersion", "kind")]
        path = draw(st.sampled_from(paths))
        parent: Any = obj
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = draw(JSON)
    return obj


@examples(800)
@given(obj=corrupted(), operation=st.sampled_from(["CREATE", "UPDATE"]))
def test_any_json_in_a_workload_gets_an_answer(obj: dict[str, Any], operation: str) -> None:
    old = copy.deepcopy(_FULL_JOB if obj.get("kind") == "Job" else _FULL_DEPLOYMENT) if operation == "UPDATE" else None
    body = review_body(obj, "ml", operation=operation, old=old)
    original = copy.deepcopy(obj)
    try:
        outcome = review(body, TEAMS, inventory=NODES)
    except MalformedReview as exc:  # the server's HTTP 400, with its reason
        assert str(exc).startswith("request.")
        return
    assert obj == original, "the review must not modify its input"
    response = outcome.response["response"]
    assert response["uid"] == body["request"]["uid"]
    assert isinstance(response["allowed"], bool)
    if not response["allowed"]:
        # A denial: 422 for a malformed object, 403 for a policy, the reason in words; never a patch.
        assert outcome.patch == [] and "patch" not in response
        assert response["status"]["code"] == (422 if outcome.plan.invalid else 403)
        assert response["status"]["message"].startswith("kueue-governor: ")
        if outcome.plan.invalid:  # a malformed object: each message names a path the object has
            present = {dotted(path) for path in _paths(obj)}
            for denial in outcome.plan.denials:
                named = denial.removeprefix("malformed object: ").split(" must be ")[0]
                if denial.endswith("got null") and named not in present:  # a required field left out
                    named = re.sub(r"(\.[^.\[]+|\[\d+\])$", "", named)  # its parent must be there
                if " must be set: " in denial:  # a field left out, below maps that may be left out too
                    while named not in present and "." in named:
                        named = named.rsplit(".", 1)[0]
                assert named in present, denial
        return
    if outcome.patch:
        # The patch is what the response carries, only adds (and suspend's one replace), and applies.
        assert json.loads(base64.b64decode(response["patch"])) == outcome.patch
        assert {op["op"] for op in outcome.patch} <= {"add", "replace"}
        patched = apply_patch(obj, outcome.patch)
    else:
        assert "patch" not in response
        patched = obj
    if operation == "CREATE" and obj.get("kind") == "Job" and lookup(obj, ("metadata", "labels", QUEUE)) is None:
        # A Job created without a queue label and admitted leaves queued and suspended, whatever else is in it.
        assert lookup(patched, ("metadata", "labels", QUEUE)) == "ml-queue"
        assert lookup(patched, ("spec", "suspend")) is True


def _ready(node: dict[str, Any]) -> bool:
    """Has a condition ``{"type": "Ready", "status": "True"}`` (read without the inventory's code)."""
    status = node.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    return isinstance(conditions, list) and {"type": "Ready", "status": "True"} in [
        {"type": c.get("type"), "status": c.get("status")} for c in conditions if isinstance(c, dict)
    ]


@examples(200)
@given(node=st.dictionaries(st.sampled_from(["metadata", "spec", "status"]), JSON, max_size=3))
def test_any_json_in_a_node_dump_counts_as_an_unusable_node(node: dict[str, Any]) -> None:
    inventory = NodeInventory.from_objects([node])
    assert len(inventory) == 1
    parsed = inventory.nodes[0]
    spec = node.get("spec")
    cordoned = isinstance(spec, dict) and spec.get("unschedulable") is True
    assert parsed.schedulable is (_ready(node) and not cordoned)
    assert all(isinstance(v, Decimal) for v in parsed.allocatable.values())
    fits = inventory.largest_domain(["kubernetes.io/hostname"], {}, {"nvidia.com/gpu": 1})
    usable = parsed.schedulable and "kubernetes.io/hostname" in parsed.labels and not parsed.taints
    # A node without readiness, a host label or room is no capacity at all; else host = whole flavor.
    assert fits == ([parsed.pods_fitting({"nvidia.com/gpu": Decimal(1)})] * 2 if usable else [0, 0])
    assert all(f >= 0 for f in fits)


# Small inventories: up to 6 nodes over 2 blocks × 3 hosts, random GPUs, pod limits, readiness,
# cordons and taints; pods of 1..9 GPUs, tolerating the taint or not.
HOSTS = [("b1", "h1"), ("b1", "h2"), ("b2", "h3"), ("b2", "h4"), ("b2", "h5"), ("b3", "h6")]
LEVELS2 = ["example.com/block", "kubernetes.io/hostname"]
TAINT = {"key": "example.com/maintenance", "effect": "NoSchedule"}


@st.composite
def small_nodes(draw: st.DrawFn) -> list[dict[str, Any]]:
    nodes = []
    for block, host in draw(st.lists(st.sampled_from(HOSTS), unique=True, max_size=6)):
        labels = {LEVELS2[1]: host}
        if draw(st.integers(0, 9)):  # now and then a node without its block label
            labels[LEVELS2[0]] = block
        allocatable = {"nvidia.com/gpu": str(draw(st.integers(0, 16)))}
        if draw(st.booleans()):
            allocatable["pods"] = str(draw(st.integers(0, 3)))
        ready = draw(st.sampled_from(["True", "True", "False", "Unknown"]))
        spec: dict[str, Any] = {}
        if draw(st.integers(0, 4)) == 0:
            spec["unschedulable"] = True
        if draw(st.integers(0, 4)) == 0:
            spec["taints"] = [TAINT]
        nodes.append(
            {
                "metadata": {"name": host, "labels": labels},
                "spec": spec,
                "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": ready}]},
            }
        )
    return nodes


def brute_force(nodes: list[dict[str, Any]], gpus: int, tolerant: bool) -> list[int]:
    """Pods of ``gpus`` GPUs that fit in the largest block, the largest host, and all nodes."""
    per_node: dict[tuple[str, str], int] = {}
    for node in nodes:
        labels, spec, status = node["metadata"]["labels"], node["spec"], node["status"]
        if status["conditions"][0]["status"] != "True" or spec.get("unschedulable"):
            continue
        if spec.get("taints") and not tolerant:
            continue
        if LEVELS2[0] not in labels:
            continue
        slots = int(status["allocatable"].get("pods", 110))
        fit = int(status["allocatable"]["nvidia.com/gpu"]) // gpus
        per_node[(labels[LEVELS2[0]], labels[LEVELS2[1]])] = min(slots, fit)
    blocks: dict[str, int] = {}
    for (block, _), fit in per_node.items():
        blocks[block] = blocks.get(block, 0) + fit
    return [max(blocks.values(), default=0), max(per_node.values(), default=0), sum(per_node.values())]


@examples(300)
@given(nodes=small_nodes(), gpus=st.integers(1, 9), tolerant=st.booleans())
def test_largest_domain_is_the_brute_force_answer(nodes: list[dict[str, Any]], gpus: int, tolerant: bool) -> None:
    tolerations = [{"key": TAINT["key"], "operator": "Exists"}] if tolerant else []
    pod = PodConstraints(requests={"nvidia.com/gpu": Decimal(gpus)}, tolerations=tolerations)
    fits = NodeInventory.from_objects(nodes).largest_domain(LEVELS2, {}, pod)
    assert fits == brute_force(nodes, gpus, tolerant)
    block, host, total = fits
    assert host <= block <= total  # a host lies in a block, a block in the flavor


@pytest.mark.parametrize(("resource", "amount"), [("cpu", "1e-30"), ("nvidia.com/gpu", "8E+18"), ("cpu", 1e-300)])
def test_extreme_requests_are_answered(resource: str, amount: Any) -> None:
    """Regression: a request of 1e-30 GPUs overflowed Decimal division (HTTP 500). (A superscript
    digit, once here, is no quantity nor count: refused by path, tests/test_malformed.py.) A GPU
    count must be whole (an extended resource), so the tiny amounts are CPUs now."""
    obj = copy.deepcopy(BASES[0])
    obj["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"][resource] = amount
    obj["spec"]["parallelism"] = 2
    outcome = review(review_body(obj, "ml"), TEAMS, inventory=NODES)
    response = outcome.response["response"]
    # Answered, not crashed: refused only as never admissible (POLICY's node affinity, zone In [a],
    # matches none of NODES; 8E+18 GPUs, near the largest quantity, also exceed the quota), with the
    # numbers. (1E+9999 is beyond 2^63-1, no Kubernetes quantity: tests/test_malformed.py.)
    assert response["allowed"] is False
    assert "can never be admitted" in response["status"]["message"]
    if amount == "8E+18":
        assert "16000000000000000000 nvidia.com/gpu ('main' 2 × 8000000000000000000)" in response["status"]["message"]


@pytest.mark.parametrize("amount", ["1e-30", 1e-300])
def test_a_tiny_gpu_request_is_malformed(amount: Any) -> None:
    obj = copy.deepcopy(BASES[0])
    obj["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = amount
    outcome = review(review_body(obj, "ml"), TEAMS, inventory=NODES)
    [denial] = outcome.plan.denials
    assert denial.startswith(
        "malformed object: spec.template.spec.containers[0].resources.requests.nvidia.com/gpu must be a whole number"
    )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"a": NaN}', "NaN is not a JSON value"),
        (b'{"a": Infinity}', "Infinity is not a JSON value"),
        (b"[" * 100000 + b"]" * 100000, "nested more than 512 levels deep"),
        (b'{"a": 1e400}', "the number 1e400 is out of range of a 64-bit float"),
        (b"\xff", "not UTF-8"),
    ],
)
def test_bodies_json_forbids_are_refused(raw: bytes, message: str) -> None:
    with pytest.raises(MalformedReview, match=message):
        decode_body(raw)


def test_real_node_dump_loads(tmp_path: Any) -> None:
    path = tmp_path / "nodes.json"
    node = {"metadata": {"name": "n", "labels": ["not", "a", "map"]}, "status": "x"}
    path.write_text(json.dumps({"kind": "List", "items": [node]}))
    inventory = load_nodes(path)
    assert [(n.name, dict(n.labels), dict(n.allocatable), n.schedulable) for n in inventory.nodes] == [
        ("n", {}, {}, False)
    ]


@pytest.mark.parametrize(
    ("value", "text"),
    [("16", "16"), ("0.5", "0.5"), ("1E+9999", "1E+9999"), ("2.5E+40", "2.5E+40"), ("1e-30", "1E-30")],
)
def test_quantities_in_messages_stay_short(value: str, text: str) -> None:
    """Regression: a request of 1E+9999 was quoted with 10,000 digits, and the cut message lost its numbers."""
    assert format_quantity(Decimal(value)) == text


# -- counts and quantities: read when well formed, refused by path otherwise ---------------------------

INT32_MAX = 2**31 - 1
COUNT_VALUES = st.one_of(
    st.none(),
    st.integers(-(2**40), 2**40),
    st.integers(0, 64),
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(-5, 5).map(float),
    st.booleans(),
    st.text(max_size=6),
    st.sampled_from(["2", "-1", "\u00b2", "1e3", "0x10", " 3"]),
)


def _count_ok(value: Any) -> bool:
    """Kubernetes' int32 counts, decoded from JSON: an integer from 0 to 2^31-1 (a whole float as
    kubectl sends YAML's 2.0: the number 2), or unset."""
    if type(value) is float and value == int(value):
        value = int(value)
    return value is None or (type(value) is int and 0 <= value <= INT32_MAX)


@examples(300)
@given(data=st.data(), kind=st.sampled_from([k for k, (_, _, counts) in KINDS.items() if counts]))
def test_any_value_of_a_count_is_read_or_refused_by_path(data: st.DataObject, kind: str) -> None:
    build, _, counts = KINDS[kind]
    path = data.draw(st.sampled_from(counts))
    value = data.draw(COUNT_VALUES)
    outcome = answer(with_value(build(), path, value))
    if _count_ok(value):
        assert_admitted(outcome)
    else:
        assert outcome.plan.invalid and outcome.response["response"]["status"]["code"] == 422
        [denial] = outcome.plan.denials
        assert denial.startswith(f"malformed object: {dotted(path)} must be ")


# Quantities by construction: the valid ones from the quantity grammar, the invalid ones negative,
# of another JSON type, or with a suffix the grammar does not have.
VALID_QUANTITIES = st.one_of(
    st.from_regex(r"\+?[0-9]{1,4}(\.[0-9]{1,3})?(m|k|M|G|Ki|Mi|Gi|e[0-9])?", fullmatch=True),
    st.integers(0, 10**9),
    st.floats(0, 1e9),
)
INVALID_QUANTITIES = st.one_of(
    st.from_regex(r"-[1-9][0-9]{0,3}(m|Gi)?", fullmatch=True),
    st.integers(max_value=-1),
    st.floats(max_value=-1e-6, allow_infinity=False),
    st.from_regex(r"[0-9]{1,3}(Xi|gpu| GPUs|\.\.|Kib|i)", fullmatch=True),
    st.text(alphabet="xyzXYZ!# ", min_size=1, max_size=4),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
)


@examples(300)
@given(
    data=st.data(),
    kind=st.sampled_from(TEMPLATED),
    field=st.sampled_from(QUANTITY_FIELDS),
    valid=st.booleans(),
)
def test_any_value_of_a_quantity_is_read_or_refused_by_path(
    data: st.DataObject, kind: str, field: tuple[Any, ...], valid: bool
) -> None:
    build, templates, _ = KINDS[kind]
    value = data.draw(VALID_QUANTITIES if valid else INVALID_QUANTITIES)
    path = (*data.draw(st.sampled_from(templates)), *field)
    outcome = answer(with_value(build(), path, value))
    if valid and is_extended_resource(str(field[-1])) and parse_quantity(value) % 1:
        valid = False  # an extended resource (nvidia.com/gpu) is a whole number (Kubernetes validation)
    if type(value) is float and not value.is_integer() and _schema_typed(kind):
        valid = False  # no queue label here: Kueue does not re-encode it, the CRD's schema refuses it
    if valid:
        assert_admitted(outcome)
    else:
        [denial] = outcome.plan.denials
        assert denial.startswith(f"malformed object: {dotted(path)} must be ")
