"""Kueue is the oracle for the Ray head: what KubeRay injects, and the RayJob CRD's defaults.

Each Ray workload goes through the live governor into ``hyperpod-ns-research`` (the RayJob and
RayCluster CRDs of the KubeRay release Kueue v0.19.2 pins are installed, ``e2e.manifests.
WORKLOAD_CRDS``); then, as in ``e2e/test_kueue_view.py``, our view of the stored object must equal
Kueue's Workload (podset names and counts, then each admitted podset's count and resource usage).
And offline equals live: ``kgov mutate --explain`` of the manifest as written (no API server, so
the CRD defaults are its own) must print the same podsets and per-pod requests as Kueue's
admitted Workload.

Cases: a RayCluster with ``ray.io/ft-enabled`` (head raised to 200m / 256Mi), one with
``gcsFaultToleranceOptions``, an elastic RayCluster with in-tree autoscaling (the autoscaler's
500m / 512Mi in the head), a ``SidecarMode`` RayJob (the submitter's 500m / 200Mi in the head) and
a RayJob without ``submissionMode`` (``K8sJobMode`` from the CRD: a ``submitter`` podset).
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from kubernetes_asyncio.dynamic import DynamicClient

from e2e.support import (
    BUNDLED_PLATFORM,
    Cleanup,
    Refused,
    create_with_warnings,
    get,
    is_true,
    load_yaml_documents,
    wait_for,
    workload_for,
)
from e2e.test_kueue_view import CASES, DATA_SCIENCE, RESEARCH, Differential, kueue_usage, kueue_verdict, served, unique
from webhook.cli import main
from webhook.core.plan.rules.capacity import requests_text

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("bundled_governor")]

EXPLAINED = re.compile(r"^#   podset '(?P<name>[^']*)' \(Kueue's view\): (?P<count>\d+) pods? of (?P<requests>.*)$")


def ray_container(name: str, cpu: str, memory: str = "64Mi", limited: bool = True) -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": memory}
    resources = {"requests": requests, "limits": requests} if limited else {"requests": requests}
    return {"name": name, "image": "rayproject/ray:2.9.0", "resources": resources}


def ray_cluster_spec(head_cpu: str = "100m", limited: bool = False) -> dict[str, Any]:
    """A head of ``head_cpu`` and 64Mi (below the fault-tolerance floor; with limits of the same
    when ``limited``), and 2 workers of 500m and 64Mi."""
    return {
        "headGroupSpec": {
            "rayStartParams": {},
            "template": {"spec": {"containers": [ray_container("ray-head", head_cpu, limited=limited)]}},
        },
        "workerGroupSpecs": [
            {
                "groupName": "small-group",
                "replicas": 2,
                "minReplicas": 0,
                "maxReplicas": 4,
                "rayStartParams": {},
                "template": {"spec": {"containers": [ray_container("ray-worker", "500m")]}},
            }
        ],
    }


def ray_cluster(annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": unique("raycluster"), "annotations": annotations or {}},
        "spec": {**ray_cluster_spec(), **spec},
    }


def limited_ft_cluster() -> dict[str, Any]:
    """Fault tolerance raises the head's requests to 200m / 256Mi above its limits of 100m / 64Mi."""
    body = ray_cluster({"ray.io/ft-enabled": "true"})
    body["spec"]["headGroupSpec"] = ray_cluster_spec(limited=True)["headGroupSpec"]
    return body


def ray_job(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": unique("rayjob")},
        "spec": {"entrypoint": "python -c 1", "rayClusterSpec": ray_cluster_spec("1"), **spec},
    }


def autoscaling_sample() -> dict[str, Any]:
    """Kueue v0.19.2's ``site/static/examples/jobs/ray-job-autoscaling-sample.yaml``, its own queue
    label left out (the governor adds the team's), its ``elastic-job`` annotation kept (Kueue
    refuses autoscaling without it)."""
    (sample,) = load_yaml_documents(CASES / "jobs" / "ray-job-autoscaling-sample.yaml")
    sample["metadata"]["labels"].pop("kueue.x-k8s.io/queue-name")
    sample["metadata"]["name"] = unique("rayjob-autoscaling")
    return sample


def cases() -> dict[str, dict[str, Any]]:
    sample = {"kueue-autoscaling-sample": autoscaling_sample()} if CASES.is_dir() else {}
    return {
        **sample,
        "ft-annotation": ray_cluster({"ray.io/ft-enabled": "true"}),
        "gcs-ft-options": ray_cluster(gcsFaultToleranceOptions={"redisAddress": "redis:6379"}),
        "autoscaling": ray_cluster({"kueue.x-k8s.io/elastic-job": "true"}, enableInTreeAutoscaling=True),
        "sidecar-mode": ray_job(submissionMode="SidecarMode"),
        "no-submission-mode": ray_job(),
    }


def offline_sizes(body: dict[str, Any], directory: Path) -> dict[str, tuple[int, str]]:
    """``kgov mutate --explain`` of ``body`` as written: podset → (pods, per-pod requests)."""
    manifest = directory / "manifest.yaml"
    manifest.write_text(yaml.safe_dump(body))
    result = CliRunner().invoke(
        main, ["mutate", "--platform", str(BUNDLED_PLATFORM), "-n", RESEARCH, "-f", str(manifest), "--explain"]
    )
    assert result.exit_code == 0, result.stderr
    found = {}
    for line in result.stderr.splitlines():
        if match := EXPLAINED.match(line):
            found[match["name"]] = (int(match["count"]), match["requests"])
    return found


def live_sizes(workload: dict[str, Any]) -> dict[str, tuple[int, str]]:
    """Kueue's admitted Workload: podset → (pods, per-pod requests), from its resource usage."""
    out = {}
    for name, (count, usage) in kueue_usage(workload).items():
        per_pod: dict[str, Decimal] = {resource: amount / count for resource, amount in usage.items()} if count else {}
        out[name] = (count, requests_text(per_pod))
    return out


@pytest.mark.parametrize("case", sorted(cases()))
async def test_a_ray_head_is_seen_as_kueue_sees_it_online_and_offline(
    dynamic: DynamicClient, cleanup: Cleanup, case: str, tmp_path: Path
) -> None:
    body = cases()[case]
    if not await served(dynamic, body["apiVersion"], body["kind"]):
        pytest.skip(f"{body['apiVersion']} {body['kind']} is not served by this API server")
    offline = offline_sizes(body, tmp_path)
    differential = Differential()
    await differential.check(dynamic, cleanup, body, case)
    differential.report(f"ray case {case}")
    assert differential.mismatches == []
    assert differential.podsets_compared, differential.waiting
    stored = await wait_for(
        lambda: _admitted_workload(dynamic, body), f"{case}: the admitted Workload", 30, interval=0.5
    )
    live = live_sizes(stored)
    print(f"\n{case}: offline {offline}\n{case}: live    {live}")
    assert offline == live


async def _admitted_workload(dynamic: DynamicClient, body: dict[str, Any]) -> dict[str, Any] | None:
    obj = await get(dynamic, body["apiVersion"], body["kind"], body["metadata"]["name"], RESEARCH)
    if obj is None:
        return None
    workload = await workload_for(dynamic, RESEARCH, obj["metadata"]["uid"])
    return workload if workload and is_true(workload, "Admitted") else None


async def test_a_fault_tolerant_head_limited_below_the_floor_is_refused_online_and_offline(
    dynamic: DynamicClient, cleanup: Cleanup, tmp_path: Path
) -> None:
    """Kueue's Workload asks 200m / 256Mi for a head limited to 100m / 64Mi, which its
    ``ValidateResources`` never admits: the live governor refuses it (research's queue rule is
    enforced), and ``kgov mutate`` says the same; where the rule only warns, Kueue leaves the
    Workload pending for that reason."""
    body = limited_ft_cluster()
    if not await served(dynamic, body["apiVersion"], body["kind"]):
        pytest.skip("ray.io/v1 RayCluster is not served by this API server")
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(yaml.safe_dump(body))
    result = CliRunner().invoke(
        main, ["mutate", "--platform", str(BUNDLED_PLATFORM), "-n", RESEARCH, "-f", str(manifest)]
    )
    expected = "podset 'head' can never be admitted: container 'ray-head' requests cpu 0.2, above its limit 0.1"
    assert result.exit_code == 1 and expected in result.stderr, result.stderr
    body["metadata"]["namespace"] = RESEARCH
    cleanup.add(body)
    with pytest.raises(Refused) as refused:
        await create_with_warnings(dynamic, body)
    assert expected in str(refused.value.status.get("message"))
    # Where the queue rule only warns (data-science), it is created and Kueue never admits it.
    warned = limited_ft_cluster()
    warned["metadata"]["namespace"] = DATA_SCIENCE
    cleanup.add(warned)
    created = await create_with_warnings(dynamic, warned)
    assert [w for w in created.warnings if expected in w], created.warnings
    admitted, message = await kueue_verdict(dynamic, DATA_SCIENCE, created.obj["metadata"]["uid"])
    print(f"\nKueue: {message}")
    assert not admitted
    assert "requests must not exceed its limits" in message, message
