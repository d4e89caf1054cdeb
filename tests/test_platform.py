"""Platform files that used to pass validation yet made the webhook inject values the API server or
Kueue reject: each case with the exact path and message ``check_platform`` (or the models) report."""

from __future__ import annotations

import copy
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from webhook.core.objects.quantity import QuantityError, parse_quantity
from webhook.core.platform import naming, policy
from webhook.core.platform.platform import (
    Platform,
    PlatformError,
    check_platform,
    load_platform,
    parse_platform,
    platform_json_schema,
)

EXAMPLE = Path(__file__).resolve().parents[1] / "kueue-config" / "platform.yaml"
LEVELS = ["example.com/block", "example.com/rack", "kubernetes.io/hostname"]
GPU = "nvidia.com/gpu"


def _team(name: str) -> dict[str, Any]:
    return {"name": name, "cohort": "all", "quotas": [{"flavor": "gpu", "resources": {GPU: {"nominalQuota": 8}}}]}


BASE: dict[str, Any] = {
    "apiVersion": "kueue-governor.io/v1alpha1",
    "kind": "Platform",
    "topologies": [{"name": "net", "levels": LEVELS}],
    "flavors": [{"name": "gpu", "nodeLabels": {"example.com/pool": "gpu"}, "topologyName": "net"}],
    "cohorts": [{"name": "all"}],
    "priorities": [{"name": "high", "value": 100, "podPriorityClass": True}],
    "teams": [_team("alpha"), _team("beta")],
}

Change = dict[str, Any]  # "a|b|0|c" (keys split on "|": resource names hold "/" and ".") → value;
# missing mappings on the way are created


def doc_with(change: Change) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    for path, value in change.items():
        *parents, last = [int(p) if p.isdigit() else p for p in path.split("|")]
        node: Any = doc
        for part in parents:
            node = node.setdefault(part, {}) if isinstance(node, dict) else node[part]
        node[last] = value
    return doc


def problems(doc: dict[str, Any]) -> list[tuple[str, str]]:
    try:
        parse_platform(doc)
    except PlatformError as exc:
        return [(p.path, p.message) for p in exc.problems]
    return []


A60 = "a" * 60
A40 = "a" * 40
DNS_REASON = (
    "is not a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit, "
    "at most 63 characters)"
)
LABEL_VALUE_REASON = (
    "is not a valid label value (at most 63 of [A-Za-z0-9-_.], starting and ending with a letter or digit)"
)
LABEL_LIMIT = "a label value has at most 63"
BOOLEAN = "(a boolean) is not a Kubernetes quantity (e.g. 8, 500m, 64Gi)"
LABEL_KEY_REASON = (
    "is not a valid label key ([prefix/]name; name: at most 63 of [A-Za-z0-9-_.], starting and ending with a "
    "letter or digit; prefix: a DNS-1123 subdomain)"
)
QUOTA = f"teams[0].quotas[0].resources.{GPU}"
QUOTA_KEY = f"teams|0|quotas|0|resources|{GPU}"
AFFINITY = "teams|0|policy|nodeAffinity"
NOT_A_NUMBER = "is not a Kubernetes quantity (a finite number, e.g. 8, 500m, 64Gi)"
OUT_OF_RANGE = (
    "is out of the range of a Kubernetes quantity (at most 2^63-1 = 9223372036854775807 in magnitude, in base units)"
)
SAME_SELECTOR = (
    "teams[1].namespaceSelector",
    "same namespaceSelector as team 'alpha' (teams[0]): every namespace it selects would belong to both teams",
)

CASES: dict[str, tuple[Change, list[tuple[str, str]]]] = {
    # 1. Names the naming preset derives must be valid where they land.
    "hyperpod-names-of-a-60-character-team": (
        {"naming": "hyperpod", "teams|0|name": A60},
        [
            (
                "teams[0].name",
                f"Namespace name 'hyperpod-ns-{A60}' would be 72 characters; a namespace name has at most 63",
            ),
            (
                "teams[0].name",
                f"ClusterQueue name 'hyperpod-ns-{A60}-clusterqueue' would be 85 characters; {LABEL_LIMIT}",
            ),
            (
                "teams[0].name",
                f"LocalQueue name 'hyperpod-ns-{A60}-localqueue' would be 83 characters; {LABEL_LIMIT}",
            ),
        ],
    ),
    "hyperpod-local-queue-of-exactly-63-characters-passes": (
        {"naming": "hyperpod", "teams|0|name": A40},
        [
            (
                "teams[0].name",
                f"ClusterQueue name 'hyperpod-ns-{A40}-clusterqueue' would be 65 characters; {LABEL_LIMIT}",
            )
        ],
    ),
    "listed-namespaces-are-not-derived": (
        {"naming": "hyperpod", "teams|0|name": A40, "teams|0|namespaces": ["ml"]},
        [
            (
                "teams[0].name",
                f"ClusterQueue name 'hyperpod-ns-{A40}-clusterqueue' would be 65 characters; {LABEL_LIMIT}",
            )
        ],
    ),
    "default-naming-local-queue-of-a-60-character-team": (
        {"teams|0|name": A60},
        [("teams[0].name", f"LocalQueue name '{A60}-queue' would be 66 characters; a label value has at most 63")],
    ),
    "hyperpod-priority-class-of-64-characters": (
        {"naming": "hyperpod", "priorities|0|name": "p" * 55},
        [
            (
                "priorities[0].name",
                f"WorkloadPriorityClass name '{'p' * 55}-priority' would be 64 characters; {LABEL_LIMIT}",
            )
        ],
    ),
    # 2. policy.queue names: DNS-1123 labels, never another team's LocalQueue.
    "queue-default-not-a-label": (
        {"teams|0|policy": {"queue": {"default": "Team_Queue"}}},
        [("teams[0].policy.queue.default", f"'Team_Queue' {DNS_REASON}")],
    ),
    "queue-allowed-too-long": (
        {"teams|0|policy": {"queue": {"allowed": ["alpha-batch", "q" * 64]}}},
        [("teams[0].policy.queue.allowed[1]", f"'{'q' * 64}' {DNS_REASON}")],
    ),
    "queue-default-of-another-team": (
        {"teams|0|policy": {"queue": {"default": "beta-queue"}}},
        [
            (
                "teams[0].policy.queue.default",
                "'beta-queue' is the LocalQueue of team 'beta' (teams[1]); a team may name only its own queues",
            )
        ],
    ),
    "queue-allowed-of-another-team-hyperpod": (
        {
            "naming": "hyperpod",
            "teams|1|policy": {"queue": {"allowed": ["beta-batch", "hyperpod-ns-alpha-localqueue"]}},
        },
        [
            (
                "teams[1].policy.queue.allowed[1]",
                "'hyperpod-ns-alpha-localqueue' is the LocalQueue of team 'alpha' (teams[0]); a team may name only "
                "its own queues",
            )
        ],
    ),
    # 3. policy.nodeAffinity: label keys, label values for In/NotIn, one integer for Gt/Lt.
    "affinity-key-not-a-label-key": (
        {AFFINITY: [{"key": "instance type", "operator": "Exists"}]},
        [("teams[0].policy.nodeAffinity[0].key", f"'instance type' {LABEL_KEY_REASON}")],
    ),
    "affinity-in-value-not-a-label-value": (
        {AFFINITY: [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5.48xlarge", "p5 48"]}]},
        [("teams[0].policy.nodeAffinity[0].values[1]", f"'p5 48' {LABEL_VALUE_REASON}")],
    ),
    "affinity-notin-without-values": (
        {AFFINITY: [{"key": "example.com/pool", "operator": "NotIn"}]},
        [("teams[0].policy.nodeAffinity[0].values", "operator NotIn needs at least one value")],
    ),
    "affinity-gt-not-an-integer": (
        {AFFINITY: [{"key": "example.com/gpus", "operator": "Gt", "values": ["8Gi"]}]},
        [("teams[0].policy.nodeAffinity[0].values[0]", "operator Gt needs an integer value, got '8Gi'")],
    ),
    "affinity-lt-beyond-int64": (
        {AFFINITY: [{"key": "example.com/gpus", "operator": "Lt", "values": ["9223372036854775808"]}]},
        [
            (
                "teams[0].policy.nodeAffinity[0].values[0]",
                "operator Lt needs an integer value, got '9223372036854775808'",
            )
        ],
    ),
    "affinity-lt-with-two-values": (
        {AFFINITY: [{"key": "example.com/gpus", "operator": "Lt", "values": ["4", "8"]}]},
        [("teams[0].policy.nodeAffinity[0].values", "operator Lt needs exactly one integer value")],
    ),
    "affinity-exists-with-values": (
        {AFFINITY: [{"key": "example.com/gpus", "operator": "Exists", "values": ["8"]}]},
        [("teams[0].policy.nodeAffinity[0].values", "operator Exists takes no values")],
    ),
    # 4. Namespace ownership over the effective namespaces; selectors; system namespaces.
    "listed-namespace-is-another-teams-default": (
        {"teams|1|namespaces": ["beta", "alpha"]},
        [
            (
                "teams[1].namespaces[1]",
                "namespace 'alpha' is claimed by team 'alpha' (teams[0]) and team 'beta'; a namespace belongs to one "
                "team",
            )
        ],
    ),
    "default-namespace-listed-by-another-team": (
        {"teams|0|namespaces": ["beta"]},
        [
            (
                "teams[1].name",
                "namespace 'beta' (the team's default namespace) is claimed by team 'alpha' (teams[0]) and team "
                "'beta'; a namespace belongs to one team",
            )
        ],
    ),
    "hyperpod-default-namespace-listed-by-another-team": (
        {"naming": "hyperpod", "teams|1|namespaces": ["hyperpod-ns-alpha"]},
        [
            (
                "teams[1].namespaces[0]",
                "namespace 'hyperpod-ns-alpha' is claimed by team 'alpha' (teams[0]) and team 'beta'; a namespace "
                "belongs to one team",
            )
        ],
    ),
    "namespace-listed-twice": (
        {"teams|0|namespaces": ["ml", "ml"]},
        [("teams[0].namespaces[1]", "namespace 'ml' is listed twice")],
    ),
    "system-namespace-listed": (
        {"teams|0|namespaces": ["ml", "kube-public"]},
        [("teams[0].namespaces[1]", "namespace 'kube-public' is a system namespace, which the webhook never touches")],
    ),
    "team-named-after-a-system-namespace": (
        {"teams|0|name": "kube-node-lease"},
        [
            (
                "teams[0].name",
                "namespace 'kube-node-lease' (the team's default namespace) is a system namespace, which the webhook "
                "never touches",
            )
        ],
    ),
    "identical-selectors-written-differently": (
        {
            "teams|0|namespaceSelector": {"matchLabels": {"team": "ml"}},
            "teams|1|namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "In", "values": ["ml"]}]},
        },
        [SAME_SELECTOR],
    ),
    "two-empty-selectors": (
        {"teams|0|namespaceSelector": {}, "teams|1|namespaceSelector": {}},
        [SAME_SELECTOR],
    ),
    # 5. namespaceSelector requirements and labels.
    "selector-in-without-values": (
        {"teams|0|namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "In"}]}},
        [("teams[0].namespaceSelector.matchExpressions[0].values", "operator In needs at least one value")],
    ),
    "selector-does-not-exist-with-values": (
        {
            "teams|0|namespaceSelector": {
                "matchExpressions": [{"key": "team", "operator": "DoesNotExist", "values": ["a"]}]
            }
        },
        [("teams[0].namespaceSelector.matchExpressions[0].values", "operator DoesNotExist takes no values")],
    ),
    "selector-key-and-value-invalid": (
        {
            "teams|0|namespaceSelector": {
                "matchExpressions": [{"key": "example.com/", "operator": "NotIn", "values": ["ok", "-bad"]}]
            }
        },
        [
            ("teams[0].namespaceSelector.matchExpressions[0].key", f"'example.com/' {LABEL_KEY_REASON}"),
            ("teams[0].namespaceSelector.matchExpressions[0].values[1]", f"'-bad' {LABEL_VALUE_REASON}"),
        ],
    ),
    "selector-match-labels-invalid": (
        {"teams|0|namespaceSelector": {"matchLabels": {"Team Name": "ml", "team": "m" * 64}}},
        [
            ("teams[0].namespaceSelector.matchLabels.Team Name", f"'Team Name' {LABEL_KEY_REASON}"),
            ("teams[0].namespaceSelector.matchLabels.team", f"'{'m' * 64}' {LABEL_VALUE_REASON}"),
        ],
    ),
    # 6. Quantities: no booleans, no NaN or infinities, no overflow; weights never negative.
    "nominal-quota-true": (
        {f"{QUOTA_KEY}|nominalQuota": True},
        [(f"{QUOTA}.nominalQuota", f"true {BOOLEAN}")],
    ),
    "borrowing-limit-false": (
        {f"{QUOTA_KEY}|borrowingLimit": False},
        [(f"{QUOTA}.borrowingLimit", f"false {BOOLEAN}")],
    ),
    "nominal-quota-nan": (
        {f"{QUOTA_KEY}|nominalQuota": math.nan},
        [(f"{QUOTA}.nominalQuota", f"nan {NOT_A_NUMBER}")],
    ),
    "lending-limit-infinite": (
        {f"{QUOTA_KEY}|lendingLimit": -math.inf},
        [(f"{QUOTA}.lendingLimit", f"-inf {NOT_A_NUMBER}")],
    ),
    "quota-exponent-overflows": (
        {f"{QUOTA_KEY}|nominalQuota": "1e9999999999"},
        [(f"{QUOTA}.nominalQuota", f"'1e9999999999' {OUT_OF_RANGE}")],
    ),
    # Regression: a nominalQuota of 10^400 was written into clusterqueues.yaml as 401 digits;
    # Kubernetes' resource.Quantity holds at most 2^63-1 (every quantity of the file, not only quotas).
    "quantities-beyond-2^63-1": (
        {
            f"{QUOTA_KEY}|nominalQuota": 10**400,
            f"{QUOTA_KEY}|borrowingLimit": "1e400",
            f"{QUOTA_KEY}|lendingLimit": "99999999999Ei",
            "flavors|0|nodeResources": {"cpu": "9223372036854775808", "memory": "8Ei"},
            "teams|0|fairSharing": {"weight": 1e300},
        },
        [
            ("flavors[0].nodeResources.cpu", f"'9223372036854775808' {OUT_OF_RANGE}"),
            ("flavors[0].nodeResources.memory", f"'8Ei' {OUT_OF_RANGE}"),
            (f"{QUOTA}.nominalQuota", f"100000000000000000000000... (401 characters) {OUT_OF_RANGE}"),
            (f"{QUOTA}.borrowingLimit", f"'1e400' {OUT_OF_RANGE}"),
            (f"{QUOTA}.lendingLimit", f"'99999999999Ei' {OUT_OF_RANGE}"),
            ("teams[0].fairSharing.weight", f"1e+300 {OUT_OF_RANGE}"),
        ],
    ),
    "quota-limit-sum-beyond-2^63-1": (
        {f"{QUOTA_KEY}|nominalQuota": "9223372036854775807", f"{QUOTA_KEY}|borrowingLimit": "1"},
        [
            (
                "teams[0].quotas",
                f"the {GPU} quota limit (nominalQuota + borrowingLimit over the team's flavors) is "
                "9223372036854775808, above 2^63-1 = 9223372036854775807, the largest Kubernetes quantity",
            )
        ],
    ),
    "node-resource-true": (
        {"flavors|0|nodeResources": {"cpu": 192, GPU: True}},
        [(f"flavors[0].nodeResources.{GPU}", f"true {BOOLEAN}")],
    ),
    "node-resource-negative": (
        {"flavors|0|nodeResources": {"cpu": "-1"}},
        [("flavors[0].nodeResources.cpu", "a node resource is never negative")],
    ),
    "team-weight-negative": (
        {"teams|0|fairSharing": {"weight": -1}},
        [("teams[0].fairSharing.weight", "a fair-sharing weight is never negative")],
    ),
    "cohort-weight-negative": (
        {"cohorts|0|fairSharing": {"weight": "-500m"}},
        [("cohorts[0].fairSharing.weight", "a fair-sharing weight is never negative")],
    ),
    "weight-true": (
        {"teams|1|fairSharing": {"weight": True}},
        [("teams[1].fairSharing.weight", f"true {BOOLEAN}")],
    ),
    # 7. Topology rule: in auto mode the level is still a level of the Topology.
    "auto-level-not-in-topology": (
        {"teams|0|policy": {"topology": {"mode": "auto", "level": "example.com/zone"}}},
        [
            (
                "teams[0].policy.topology.level",
                "'example.com/zone' is not a level of Topology 'net': "
                "['example.com/block', 'example.com/rack', 'kubernetes.io/hostname']",
            )
        ],
    ),
    # The whole value must match: "$" also matched before a trailing newline (YAML "|" block scalars).
    "names-and-labels-with-a-trailing-newline": (
        {
            "teams|0|name": "alpha\n",
            "flavors|0|nodeLabels": {"example.com/pool": "gpu\n"},
            AFFINITY: [{"key": "example.com/gpus", "operator": "Gt", "values": ["4\n"]}],
        },
        [
            ("flavors[0].nodeLabels.example.com/pool", f"'gpu\\n' {LABEL_VALUE_REASON}"),
            ("teams[0].name", f"'alpha\\n' {DNS_REASON}"),
            ("teams[0].policy.nodeAffinity[0].values[0]", "operator Gt needs an integer value, got '4\\n'"),
        ],
    ),
    "quota-with-spaces-or-non-ascii-digits": (
        {f"{QUOTA_KEY}|nominalQuota": " 8", f"{QUOTA_KEY}|borrowingLimit": "\uff18"},
        [
            (f"{QUOTA}.nominalQuota", "' 8' is not a Kubernetes quantity (e.g. 8, 500m, 64Gi)"),
            (f"{QUOTA}.borrowingLimit", "'\uff18' is not a Kubernetes quantity (e.g. 8, 500m, 64Gi)"),
        ],
    ),
    # Taints and tolerations land on the ResourceFlavor and, through Kueue, on admitted pods.
    "taint-and-toleration-labels": (
        {
            "flavors|0|nodeTaints": [{"key": "gpu type", "value": "h100", "effect": "NoSchedule"}],
            "flavors|0|tolerations": [{"key": "example.com/gpu", "operator": "Equal", "value": "a b"}],
        },
        [
            ("flavors[0].nodeTaints[0].key", f"'gpu type' {LABEL_KEY_REASON}"),
            ("flavors[0].tolerations[0].value", f"'a b' {LABEL_VALUE_REASON}"),
        ],
    ),
}


@pytest.mark.parametrize(("change", "expected"), list(CASES.values()), ids=list(CASES))
def test_platform_that_would_make_the_webhook_inject_rejected_values(
    change: Change, expected: list[tuple[str, str]]
) -> None:
    assert problems(doc_with(change)) == expected


VALID: dict[str, Change] = {
    "base": {},
    "hyperpod-local-queue-of-63-characters": {"naming": "hyperpod", "teams|0|name": "a" * 38},
    "hyperpod-priority-class-of-63-characters": {"naming": "hyperpod", "priorities|0|name": "p" * 54},
    "own-queues": {"teams|0|policy": {"queue": {"default": "alpha-batch", "allowed": ["alpha-queue", "alpha-x"]}}},
    "gt-and-lt-with-signed-integers": {
        AFFINITY: [
            {"key": "example.com/gpus", "operator": "Gt", "values": ["-5"]},
            {"key": "example.com/gpus", "operator": "Lt", "values": ["+9223372036854775807"]},
        ]
    },
    "different-selectors": {
        "teams|0|namespaceSelector": {"matchLabels": {"team": "alpha"}},
        "teams|1|namespaceSelector": {"matchLabels": {"team": "beta"}},
    },
    "selector-team-and-listed-team": {
        "teams|0|namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Exists"}]},
        "teams|1|namespaces": ["alpha", "beta"],
    },
    "zero-weight-and-string-quantities": {
        "teams|0|fairSharing": {"weight": 0},
        f"{QUOTA_KEY}|nominalQuota": "8",
        "flavors|0|nodeResources": {"memory": "2Ti", "cpu": "191500m"},
    },
    "auto-without-level": {"teams|0|policy": {"topology": {"mode": "auto"}}},
    "keyless-toleration": {"flavors|0|tolerations": [{"key": "", "operator": "Exists"}]},
}


@pytest.mark.parametrize("change", list(VALID.values()), ids=list(VALID))
def test_valid_platforms_still_pass(change: Change) -> None:
    assert problems(doc_with(change)) == []


def test_the_bundled_example_has_no_problem() -> None:
    assert check_platform(load_platform(EXAMPLE)) == []


def test_quantity_values_as_yaml_writes_them(tmp_path: Path) -> None:
    """Regression: ``nominalQuota: true`` became 1 and ``.inf`` an infinite quota."""
    path = tmp_path / "platform.yaml"
    path.write_text(
        "flavors: [{name: gpu, nodeLabels: {pool: gpu}}]\n"
        "teams:\n"
        "  - name: ml\n"
        "    quotas: [{flavor: gpu, resources: {cpu: {nominalQuota: true}, memory: {nominalQuota: .inf}}}]\n",
        encoding="utf-8",
    )
    with pytest.raises(PlatformError) as caught:
        load_platform(path)
    assert [(p.path, p.message) for p in caught.value.problems] == [
        ("teams[0].quotas[0].resources.cpu.nominalQuota", f"true {BOOLEAN}"),
        ("teams[0].quotas[0].resources.memory.nominalQuota", f"inf {NOT_A_NUMBER}"),
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, f"true {BOOLEAN}"),
        (False, f"false {BOOLEAN}"),
        (math.nan, f"nan {NOT_A_NUMBER}"),
        (math.inf, f"inf {NOT_A_NUMBER}"),
        ("1e9999999999", f"'1e9999999999' {OUT_OF_RANGE}"),
        ("1e400", f"'1e400' {OUT_OF_RANGE}"),
        (-(2**63), f"-9223372036854775808 {OUT_OF_RANGE}"),
        ("9" * 50 + "Ei", f"'{'9' * 23}... (54 characters) {OUT_OF_RANGE}"),
        ("NaN", "'NaN' is not a Kubernetes quantity (e.g. 8, 500m, 64Gi)"),
        ("Infinity", "'Infinity' is not a Kubernetes quantity (e.g. 8, 500m, 64Gi)"),
        (None, "None is not a Kubernetes quantity (e.g. 8, 500m, 64Gi)"),
    ],
)
def test_parse_quantity_refuses(value: Any, message: str) -> None:
    with pytest.raises(QuantityError) as caught:
        parse_quantity(value)
    assert str(caught.value) == message


def test_parse_quantity_still_reads_quantities() -> None:
    assert [parse_quantity(v) for v in (8, 0.5, "500m", "2Ti", "1e3", "-1", "9223372036854775807", "7Ei")] == [
        Decimal(8),
        Decimal("0.5"),
        Decimal("0.5"),
        Decimal(2**41),
        Decimal(1000),
        Decimal(-1),
        Decimal(2**63 - 1),
        Decimal(7 * 2**60),
    ]


def test_auto_level_is_documented_as_the_broadest_required_level() -> None:
    level = platform_json_schema()["$defs"]["TopologyRule"]["properties"]["level"]
    assert "auto: the broadest level at which the webhook may require placement" in level["description"]


# 8. File-level problems name the file in the message itself (`kgov generate` prints only problems).


def load_problems(path: Path) -> list[tuple[str, str]]:
    with pytest.raises(PlatformError) as caught:
        load_platform(path)
    assert str(caught.value).startswith(f"{path}: invalid platform file\n")
    return [(p.path, p.message) for p in caught.value.problems]


def test_missing_file_and_directory_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    assert load_problems(missing) == [("", f"cannot read {missing}: No such file or directory")]
    assert load_problems(tmp_path) == [("", f"cannot read {tmp_path}: Is a directory")]


def test_non_utf8_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("teams: [{name: \u00e9quipe}]\n".encode("latin-1"))
    assert load_problems(path) == [("", f"{path} is not UTF-8 text: invalid continuation byte at byte 15")]


def test_yaml_syntax_error_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "platform.yaml"
    path.write_text("naming: hyperpod\nteams: oops: [\n", encoding="utf-8")
    assert load_problems(path) == [
        (
            "",
            "not valid YAML: mapping values are not allowed here at line 2 column 12",  # one line, as every error
        )
    ]


def test_yaml_the_parser_cannot_hold_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    """Regression: a 5000-digit integer raised ValueError and deep nesting RecursionError."""
    huge = tmp_path / "huge.yaml"
    huge.write_text(f"teams: {'9' * 5000}\n", encoding="utf-8")
    assert load_problems(huge) == [
        (
            "",
            f"{huge} is not usable YAML: an integer of 5000 digits (at line 1 column 8) is too long to be a "
            "Kubernetes value",
        )
    ]
    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * 5000 + "]" * 5000, encoding="utf-8")
    assert load_problems(deep) == [
        ("", f"{deep} is not usable YAML: nested more than 200 levels deep (at line 1 column 201)")
    ]
    block = tmp_path / "block.yaml"  # block style: the composer counts, and names the path
    block.write_text("".join("  " * level + "a:\n" for level in range(300)), encoding="utf-8")
    assert load_problems(block) == [
        ("", f"{block} is not usable YAML: nested more than 200 levels deep (at line 201 column 401) within a (× 200)")
    ]


def test_naming_preset_stays_importable_from_policy() -> None:
    assert policy.team_namespaces is naming.team_namespaces
    assert policy.local_queue_name is naming.local_queue_name
    assert policy.cluster_queue_name is naming.cluster_queue_name
    assert policy.priority_class_name is naming.priority_class_name
    assert naming.SYSTEM_NAMESPACES == ("kube-system", "kube-node-lease", "kube-public")
    assert policy.ALWAYS_EXCLUDED_NAMESPACES == naming.SYSTEM_NAMESPACES


def test_pod_priority_class_may_not_use_the_reserved_system_prefix() -> None:
    doc = {
        "priorities": [{"name": "system-urgent", "value": 10, "podPriorityClass": True}],
    }
    problems = [str(p) for p in check_platform(Platform.model_validate(doc))]
    assert problems == [
        "priorities[0].name: PriorityClass name 'system-urgent': the 'system-' prefix is reserved by Kubernetes"
    ]


def test_a_priority_both_default_and_allowed_is_reported_once() -> None:
    """Regression: a podPriority default that is also allowed gave the same problem twice."""
    doc = doc_with(
        {
            "priorities|0|podPriorityClass": False,
            "teams|0|policy": {"podPriority": {"default": "high", "allowed": ["high"]}},
        }
    )
    assert problems(doc) == [
        (
            "teams[0].policy.podPriority",
            "priority 'high' has no Kubernetes PriorityClass (set podPriorityClass: true)",
        )
    ]


WHOLE = f"is not a whole number: {GPU} is an extended resource, which pods request in whole units only"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({f"{QUOTA_KEY}|nominalQuota": 0.5}, [(f"{QUOTA}.nominalQuota", f"0.5 {WHOLE}")]),
        ({f"{QUOTA_KEY}|nominalQuota": "500m"}, [(f"{QUOTA}.nominalQuota", f"500m {WHOLE}")]),
        ({f"{QUOTA_KEY}|borrowingLimit": 1.5}, [(f"{QUOTA}.borrowingLimit", f"1.5 {WHOLE}")]),
        ({f"{QUOTA_KEY}|lendingLimit": "2500m"}, [(f"{QUOTA}.lendingLimit", f"2500m {WHOLE}")]),
        ({f"flavors|0|nodeResources|{GPU}": 7.5}, [(f"flavors[0].nodeResources.{GPU}", f"7.5 {WHOLE}")]),
        # Not extended resources: fractions are fine.
        ({"teams|0|quotas|0|resources|cpu": {"nominalQuota": 0.5}}, []),
        ({"teams|0|quotas|0|resources|memory": {"nominalQuota": "1.5Gi"}}, []),
        ({"teams|0|quotas|0|resources|example.kubernetes.io/thing": {"nominalQuota": 0.5}}, []),
        # Whole amounts of an extended resource, however written.
        ({f"{QUOTA_KEY}|nominalQuota": "8000m", f"{QUOTA_KEY}|borrowingLimit": 4.0}, []),
    ],
)
def test_fractional_quota_of_an_extended_resource_is_refused(change: Change, expected: list[tuple[str, str]]) -> None:
    """Regression: ``nvidia.com/gpu: {nominalQuota: 0.5}`` was generated, a quota no pod can use."""
    assert problems(doc_with(change)) == expected
