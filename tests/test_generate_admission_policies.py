"""``kgov generate --admission-policies`` and the chart's fill values: the MutatingAdmissionPolicies
compiled from the bundled platform (SPEC §8b). The API server evaluates them in
``e2e/test_admission_policies.py``; here: which objects, rules, variables and values."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from tests.support import AWS_LEVELS, PLATFORM, platform_with
from webhook.cli.generate import generate_command
from webhook.core.kueue.kinds import KINDS
from webhook.core.kueue.view import PREFERRED, PRIORITY_LABEL, QUEUE_LABEL, REQUIRED, UNCONSTRAINED
from webhook.core.plan.policy_fill import FILLED_BY_POLICY, topology_fill, topology_template
from webhook.core.platform.platform import load_platform, parse_platform
from webhook.core.platform.policy import TopologyPlacement, compile_policies
from webhook.generate.admission_policies import (
    _literal,
    admission_policy_manifests,
    fill_rules,
    policy_name,
    team_mutations,
    team_variables,
)
from webhook.generate.chart import kinds_document, platform_values


def _policies() -> list[dict[str, Any]]:
    return admission_policy_manifests(compile_policies(load_platform(PLATFORM)))


def test_one_policy_and_binding_per_team_of_the_bundled_platform() -> None:
    objects = _policies()
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("MutatingAdmissionPolicy", "kgov-governor-fill-research"),
        ("MutatingAdmissionPolicyBinding", "kgov-governor-fill-research"),
        ("MutatingAdmissionPolicy", "kgov-governor-fill-inference"),
        ("MutatingAdmissionPolicyBinding", "kgov-governor-fill-inference"),
        ("MutatingAdmissionPolicy", "kgov-governor-fill-data-science"),
        ("MutatingAdmissionPolicyBinding", "kgov-governor-fill-data-science"),
    ]
    assert {o["apiVersion"] for o in objects} == {"admissionregistration.k8s.io/v1"}
    binding = objects[5]["spec"]
    assert binding["policyName"] == "kgov-governor-fill-data-science"
    assert binding["matchResources"]["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["hyperpod-ns-data-science", "ds-sandbox"]}
    ]
    spec = objects[0]["spec"]
    assert spec["failurePolicy"] == "Ignore" and spec["reinvocationPolicy"] == "Never"
    assert [c["name"] for c in spec["matchConditions"]] == ["not-a-kueue-managed-child", "not-left-alone"]


def test_rules_are_the_creates_of_the_versions_kueue_manages() -> None:
    rules = fill_rules()
    assert {op for rule in rules for op in rule["operations"]} == {"CREATE"}
    served = {
        (g, v, r) for rule in rules for g in rule["apiGroups"] for v in rule["apiVersions"] for r in rule["resources"]
    }
    assert served == {(row.group, version, row.resource) for row in KINDS for version in row.versions}
    assert ("kubeflow.org", "v1", "mpijobs") not in served  # the ValidatingAdmissionPolicy refuses it
    assert not any("/" in resource for _, _, resource in served)
    assert kinds_document()["fillRules"] == rules


def test_values_and_topology_per_team() -> None:
    by_team = {t.team: t for t in compile_policies(load_platform(PLATFORM)).teams}
    research, inference, science = (by_team[name] for name in ("research", "inference", "data-science"))
    variables = {v["name"]: v["expression"] for v in team_variables(research)}
    assert list(variables) == ["kind", "needQueue", "needPriority", "needTopology", "filled"]
    assert variables["needTopology"] == "false"  # mode auto: chosen from the live nodes, not CEL
    text = str(team_mutations(research))
    assert "'hyperpod-ns-research-localqueue'" in text and "'training-priority'" in text
    assert "podset-" not in text.replace("podset-group-name", "")
    assert f"'{PREFERRED}': 'topology.k8s.aws/network-node-layer-2'" in str(team_mutations(inference))
    assert f"'{REQUIRED}': 'topology.k8s.aws/network-node-layer-3'" in str(team_mutations(science))
    for team in (research, inference, science):
        mutations = team_mutations(team)
        assert [m["patchType"] for m in mutations] == ["JSONPatch"] * len(mutations)
        first = mutations[0]["jsonPatch"]["expression"]
        assert first.startswith("variables.filled != ''") and FILLED_BY_POLICY.replace("/", "~1") in first
        # never a replace or remove: only adds of what is missing
        assert "op: 'add'" in str(mutations) and "op: 'replace'" not in str(mutations)
        assert "op: 'remove'" not in str(mutations)


def test_labels_are_set_where_each_kind_keeps_them() -> None:
    team = compile_policies(load_platform(PLATFORM)).teams[0]
    queue = team_mutations(team)[1]["jsonPatch"]["expression"]
    # a CronJob's Jobs take their labels from spec.jobTemplate.metadata (the kinds table's labels_at)
    assert "'/spec/jobTemplate/metadata/labels/kueue.x-k8s.io~1queue-name'" in queue
    assert "'/metadata/labels/kueue.x-k8s.io~1queue-name'" in queue
    # suspend where the kind has one (Kubeflow: spec.runPolicy.suspend), created with its map when missing
    assert "'/spec/runPolicy/suspend'" in queue and "'/spec/runPolicy', value: {'suspend': true}" in queue
    # the missing labels map is added whole, never replaced
    assert f"path: '/metadata/labels', value: {{'{QUEUE_LABEL}': 'hyperpod-ns-research-localqueue'}}" in queue
    priority = team_mutations(team)[2]["jsonPatch"]["expression"]
    # a pod template that names a priorityClassName keeps the priority label to the webhook
    assert "object.?spec.?template.?spec.?priorityClassName.orValue('') != ''" in str(team_variables(team))
    assert f"'{PRIORITY_LABEL}': 'training-priority'" in priority
    assert "workload.codeflare.dev/v1beta2/AppWrapper" not in priority  # embedded templates: not in CEL


@pytest.mark.parametrize(
    ("mode", "slice_level", "expected"),
    [
        ("required", None, (REQUIRED, AWS_LEVELS[2])),
        ("preferred", None, (PREFERRED, AWS_LEVELS[2])),
        ("unconstrained", None, (UNCONSTRAINED, "true")),
        ("auto", None, None),
        ("required", AWS_LEVELS[3], None),  # slices depend on the podset's size
    ],
)
def test_topology_fill_only_for_a_fixed_level(mode: str, slice_level: str | None, expected: Any) -> None:
    placement = TopologyPlacement(
        mode=mode,  # type: ignore[arg-type]
        topologyName="aws",
        levels=AWS_LEVELS,
        level=None if mode in ("auto", "unconstrained") else AWS_LEVELS[2],
        sliceLevel=slice_level,
        sliceSize=4 if slice_level else None,
    )
    assert topology_fill(placement) == expected


def test_topology_goes_on_kinds_with_one_static_template_only() -> None:
    eligible = sorted(row.kind for row in KINDS if topology_template(row) is not None)
    assert eligible == ["CronJob", "Deployment", "Job", "ReplicaSet", "StatefulSet"]


def test_cel_string_literals_are_escaped() -> None:
    assert _literal("it's a \\ path") == "'it\\'s a \\\\ path'"
    assert _literal({"a": [True, 2]}) == "{'a': [true, 2]}"


def test_a_team_with_a_queue_only_fills_the_queue_only() -> None:
    (team,) = compile_policies(parse_platform(platform_with({}))).teams
    variables = {v["name"]: v["expression"] for v in team_variables(team)}
    assert variables["needPriority"] == variables["needTopology"] == "false"
    text = str(team_mutations(team))
    assert "'ml-queue'" in text and "~1priority-class', value: '" not in text  # no constant priority
    assert policy_name("x" * 70).endswith("x") and len(policy_name("x" * 70)) == 63


def test_generate_flag_writes_the_file_and_drops_it_again(tmp_path: Path) -> None:
    shutil.copy(PLATFORM, tmp_path / "platform.yaml")
    out = tmp_path / "generated"
    result = CliRunner().invoke(
        generate_command, [str(tmp_path / "platform.yaml"), "--out", str(out), "--admission-policies"]
    )
    assert result.exit_code == 0, result.output
    written = list(yaml.safe_load_all((out / "admission-policies.yaml").read_text()))
    assert written == _policies()
    assert "admission-policies.yaml" in yaml.safe_load((out / "kustomization.yaml").read_text())["resources"]
    check = CliRunner().invoke(
        generate_command, [str(tmp_path / "platform.yaml"), "--out", str(out), "--admission-policies", "--check"]
    )
    assert check.exit_code == 0
    again = CliRunner().invoke(generate_command, [str(tmp_path / "platform.yaml"), "--out", str(out)])
    assert again.exit_code == 0 and not (out / "admission-policies.yaml").exists()


def test_chart_values_carry_each_teams_mutations() -> None:
    values = platform_values(load_platform(PLATFORM))
    policy = compile_policies(load_platform(PLATFORM), extra_excluded=["kueue-governor-system"])
    for team, compiled in zip(values["platform"]["teams"], policy.teams, strict=True):
        assert team["fill"] == {"variables": team_variables(compiled), "mutations": team_mutations(compiled)}
