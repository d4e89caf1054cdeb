"""``kgov chart values`` / ``kgov chart kinds``: what the Helm chart renders from the platform file and
the kinds table (the chart itself is linted and rendered by e2e/test_helm_render.py, and its CEL is
compiled and evaluated by the API server in e2e/test_helm_cluster.py)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from webhook.cli import main
from webhook.core.kinds import KINDS, webhook_rules
from webhook.core.platform import load_platform
from webhook.core.policy import compile_policies
from webhook.generate.chart import kinds_document, managed_child_expression, platform_values

REPO = Path(__file__).resolve().parent.parent
BUNDLED = REPO / "kueue-config" / "platform.yaml"


def test_platform_values_of_the_bundled_platform() -> None:
    values = platform_values(load_platform(str(BUNDLED)))["platform"]
    assert [(t["name"], t["namespaces"], t["queues"], t["queueEnforced"]) for t in values["teams"]] == [
        ("research", ["hyperpod-ns-research"], ["hyperpod-ns-research-localqueue"], True),
        ("inference", ["hyperpod-ns-inference"], ["hyperpod-ns-inference-localqueue"], True),
        ("data-science", ["hyperpod-ns-data-science", "ds-sandbox"], ["hyperpod-ns-data-science-localqueue"], False),
    ]
    expected = compile_policies(load_platform(str(BUNDLED)), extra_excluded=["kueue-governor-system"])
    assert json.loads(values["policy"]) == json.loads(expected.model_dump_json())
    kinds = sorted({obj["kind"] for obj in values["kueueObjects"]})
    assert kinds == [
        "ClusterQueue",
        "Cohort",
        "LocalQueue",
        "PriorityClass",
        "ResourceFlavor",
        "Topology",
        "WorkloadPriorityClass",
    ]
    assert sorted(ns["metadata"]["name"] for ns in values["namespaces"]) == [
        "ds-sandbox",
        "hyperpod-ns-data-science",
        "hyperpod-ns-inference",
        "hyperpod-ns-research",
    ]


def test_kinds_document_follows_the_kinds_table() -> None:
    document = kinds_document()
    assert document["rules"] == webhook_rules()
    child = managed_child_expression("object")
    for row in KINDS:
        clause = f"r.kind == '{row.kind}'"
        assert (clause in child) == row.owns_workloads, row.kind
    assert document["cel"]["notLeftAlone"] == (
        "!(((request.kind.group == 'ray.io' && request.kind.kind == 'RayJob') && has(object.spec) && "
        "has(object.spec.clusterSelector)))"
    )
    assert "object.spec.jobTemplate.metadata.labels" in document["cel"]["queue"]


def test_chart_values_command_and_drift_check(tmp_path: Path) -> None:
    output = tmp_path / "values.yaml"
    runner = CliRunner()
    result = runner.invoke(main, ["chart", "values", str(BUNDLED), "-o", str(output)])
    assert result.exit_code == 0, result.output
    written = yaml.safe_load(output.read_text())
    assert written["platform"]["teams"][0]["name"] == "research"
    assert runner.invoke(main, ["chart", "values", str(BUNDLED), "-o", str(output), "--check"]).exit_code == 0
    output.write_text(output.read_text().replace("research", "rsrch"))
    drift = runner.invoke(main, ["chart", "values", str(BUNDLED), "-o", str(output), "--check"])
    assert drift.exit_code == 1
    assert "-  - name: rsrch" in drift.output and "+  - name: research" in drift.output


def test_chart_values_of_an_invalid_platform_names_the_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(BUNDLED.read_text().replace("flavor: p5-48xlarge", "flavor: p5", 1))
    result = CliRunner().invoke(main, ["chart", "values", str(bad)])
    assert result.exit_code == 1
    assert "unknown flavor 'p5'" in result.output
