"""Elastic Jobs (``kueue.x-k8s.io/elastic-job: "true"``): Kueue v0.19.2's Job webhook refuses
``podset-required-topology`` and ``podset-preferred-topology`` on them ("required/preferred topology
is not supported with elastic jobs", ``JobWebhook.validateTopologyRequest``), so the topology rule
never sets either and never denies such a Job as asking for less locality than a mode Kueue
refuses. Ray's elastic workloads keep their topology (Ray's webhooks accept it)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from support import aws_nodes, job, platform_with, review_body, teams_from

from webhook.cli import main
from webhook.core.admission.review import review
from webhook.core.kueue.kinds import KINDS, find_kind
from webhook.core.plan.rules.topology import PREFERRED, REQUIRED, UNCONSTRAINED, elastic_forbidden

LEVEL3 = "topology.k8s.aws/network-node-layer-3"
ELASTIC = {"kueue.x-k8s.io/elastic-job": "true"}


def policy(mode: str, enforcement: str = "enforce") -> dict[str, Any]:
    topology: dict[str, Any] = {"mode": mode, "enforcement": enforcement}
    if mode in ("required", "preferred"):
        topology["level"] = LEVEL3
    return {"queue": {}, "topology": topology}


def elastic_job(annotations: dict[str, str] | None = None, template: dict[str, str] | None = None) -> dict[str, Any]:
    obj = job(metadata={"name": "train", "annotations": dict(ELASTIC if annotations is None else annotations)})
    if template is not None:
        obj["spec"]["template"]["metadata"] = {"annotations": template}
    return obj


def run(obj: dict[str, Any], pol: dict[str, Any], **kw: Any) -> Any:
    inventory = kw.pop("inventory", None)
    return review(review_body(obj, "ml", **kw), teams_from(platform_with(pol)), inventory=inventory)


def tas_ops(outcome: Any) -> list[dict[str, Any]]:
    return [op for op in outcome.patch if "topology" in op["path"] or op["path"] == "/spec/template/metadata"]


@pytest.mark.parametrize(("mode", "inventory"), [("required", None), ("preferred", None), ("auto", aws_nodes())])
@pytest.mark.parametrize("enforcement", ["enforce", "warn", "default"])
def test_elastic_job_gets_no_topology_kueue_refuses_and_a_warning(mode: str, inventory: Any, enforcement: str) -> None:
    outcome = run(elastic_job(), policy(mode, enforcement), inventory=inventory)
    assert outcome.plan.allowed, outcome.plan.denials
    assert tas_ops(outcome) == []
    warnings = [w for w in outcome.plan.warnings if w.startswith("topology: ")]
    assert len(warnings) == 1, outcome.plan.warnings
    assert "no topology annotation set (the policy would set kueue.x-k8s.io/podset-" in warnings[0]
    assert f"Kueue refuses {REQUIRED} and {PREFERRED} on an elastic workload" in warnings[0]
    assert "topology is not supported with elastic jobs" in warnings[0]


@pytest.mark.parametrize("value", ["false", "True", ""])
def test_a_job_not_elastic_as_kueue_reads_it_keeps_its_topology(value: str) -> None:
    """Kueue's ``workloadslicing.Enabled`` compares the annotation with "true" exactly."""
    outcome = run(elastic_job({"kueue.x-k8s.io/elastic-job": value}), policy("required"))
    assert {"op": "add", "path": "/spec/template/metadata", "value": {"annotations": {REQUIRED: LEVEL3}}} in (
        outcome.patch
    )
    assert outcome.plan.warnings == []


def test_unconstrained_policy_still_applies_to_an_elastic_job() -> None:
    outcome = run(elastic_job(), policy("unconstrained"))
    assert tas_ops(outcome) == [
        {"op": "add", "path": "/spec/template/metadata", "value": {"annotations": {UNCONSTRAINED: "true"}}}
    ]
    assert outcome.plan.warnings == []


@pytest.mark.parametrize("mode", ["required", "preferred"])
def test_enforce_never_denies_an_elastic_jobs_unconstrained_topology_as_less_locality(mode: str) -> None:
    obj = elastic_job(template={UNCONSTRAINED: "true"})
    outcome = run(obj, policy(mode))
    assert outcome.plan.allowed, outcome.plan.denials
    assert outcome.plan.warnings == []
    # The same Job without the elastic annotation is refused, as before.
    plain = copy.deepcopy(obj)
    del plain["metadata"]["annotations"]
    denied = run(plain, policy(mode))
    assert not denied.plan.allowed
    assert "asks for less locality" in denied.plan.denials[0]


def test_enforce_on_update_never_denies_an_elastic_job_dropping_to_unconstrained() -> None:
    old = elastic_job(template={"team/x": "y"})
    new = elastic_job(template={UNCONSTRAINED: "true"})
    outcome = run(new, policy("required"), operation="UPDATE", old=old)
    assert outcome.plan.allowed, outcome.plan.denials


ELASTIC_REQUIRED = (
    f"topology: podset 'main': {REQUIRED} {LEVEL3!r}: required topology is not supported with elastic jobs "
    "(Kueue v0.19.2 JobWebhook.validateTopologyRequest); Kueue refuses the workload"
)


@pytest.mark.parametrize(
    ("pol", "denied"),
    [
        (policy("required"), True),
        (policy("required", "warn"), False),
        (policy("required", "default"), False),
        ({"queue": {"enforcement": "enforce"}}, True),  # no topology rule: the queue rule's enforcement
        ({"queue": {"enforcement": "warn"}}, False),
    ],
    ids=["enforce", "warn", "default", "no-rule-enforce", "no-rule-warn"],
)
def test_a_users_own_required_topology_on_an_elastic_job_is_refused_as_kueue_does(
    pol: dict[str, Any], denied: bool
) -> None:
    """Defect: it was only warned, and only for a team with a topology rule; Kueue v0.19.2's Job
    webhook refuses it in every namespace. The message is the same whatever the team's rule."""
    outcome = run(elastic_job(template={REQUIRED: LEVEL3}), pol)
    assert outcome.plan.allowed is not denied
    assert (outcome.plan.denials if denied else outcome.plan.warnings) == [ELASTIC_REQUIRED]
    assert (outcome.plan.warnings if denied else outcome.plan.denials) == []


def test_preferred_topology_on_an_elastic_job_is_refused_without_a_topology_rule() -> None:
    outcome = run(elastic_job(template={PREFERRED: LEVEL3}), {"queue": {"enforcement": "enforce"}})
    assert outcome.plan.denials == [
        f"topology: podset 'main': {PREFERRED} {LEVEL3!r}: preferred topology is not supported with elastic jobs "
        "(Kueue v0.19.2 JobWebhook.validateTopologyRequest); Kueue refuses the workload"
    ]


def test_only_the_job_row_forbids_topology_on_elastic_workloads() -> None:
    forbidding = [row.kind for row in KINDS if row.elastic_forbids]
    assert forbidding == ["Job"]
    ray = {"metadata": {"annotations": ELASTIC}}
    row = find_kind("ray.io/v1", "RayCluster")
    assert row is not None and elastic_forbidden(ray, row) == ()


def test_mutate_explain_names_kueues_elastic_rule(tmp_path: Path) -> None:
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(elastic_job()))
    platform = tmp_path / "platform.yaml"
    platform.write_text(yaml.safe_dump(platform_with(policy("required"))))
    result = CliRunner().invoke(
        main, ["mutate", "--platform", str(platform), "-n", "ml", "-f", str(manifest), "--explain"]
    )
    assert result.exit_code == 0, result.stderr
    out = yaml.safe_load(result.stdout)
    assert "metadata" not in out["spec"]["template"]
    assert "#   warning: topology: podset 'main': no topology annotation set (the policy would set " in result.stderr
    assert "on an elastic workload of this kind" in result.stderr
