"""The fail-safe when the webhook dies (SPEC §8b), against the real API server.

``kgov serve`` for the bundled platform is registered as the chart registers it (``helm
template``: its MutatingWebhookConfiguration with the rules, matchConditions, timeout and the
failure policy under test, and its ValidatingAdmissionPolicies with their bindings). An unlabelled
Job in research's namespace is labelled while the server runs; the server is then killed
(SIGKILL, no drain) and the same Job is refused:

* ``failurePolicy: Fail``: by the API server, whose message names our webhook and why the call
  failed;
* ``failurePolicy: Ignore``: the API server goes on without the webhook, and the chart's
  ValidatingAdmissionPolicy refuses the Job for want of research's queue label, with its message.

Either way no unlabelled Job is stored in the namespace. (Just applied, the policies take a few
seconds to be in force: dry-run creates, which store nothing, are retried until one is refused.)
``benchmarks/bench_faults.py`` runs the same under a stream of creates with more faults
(restarts, certificate rotation, policy change, expired watches).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.dynamic import DynamicClient

from e2e import devcluster, support
from e2e.conftest import E2ECluster
from e2e.helm_support import chart_registration

pytestmark = pytest.mark.e2e

RESEARCH = "hyperpod-ns-research"
RESEARCH_QUEUE = "hyperpod-ns-research-localqueue"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
WEBHOOK = "governor.kueue-governor.io"  # the chart's webhook name


def unlabelled_job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": RESEARCH},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
                }
            },
        },
    }


async def apply_all(dynamic: DynamicClient, objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        resource = await dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        await dynamic.server_side_apply(resource, obj, field_manager=support.FIELD_MANAGER, force_conflicts=True)


async def delete_all(dynamic: DynamicClient, objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        resource = await dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        with contextlib.suppress(Exception):  # already gone
            await dynamic.delete(resource, name=obj["metadata"]["name"])


@pytest.mark.parametrize("failure_policy", ["Fail", "Ignore"])
async def test_webhook_killed_a_team_job_is_refused(
    failure_policy: str,
    dynamic: DynamicClient,
    e2e_cluster: E2ECluster,
    bundled_config: support.Generated,
    governor: Callable[[Path], str],
    cleanup: support.Cleanup,
) -> None:
    url = await asyncio.to_thread(governor, support.BUNDLED_PLATFORM)
    assert e2e_cluster.local is not None  # the governor fixture skips otherwise
    paths = devcluster.Paths(Path(e2e_cluster.local.state_dir))
    registration = await asyncio.to_thread(
        chart_registration, f"{url}/mutate", failure_policy, paths.ca_crt.read_bytes()
    )
    policies = [obj for obj in registration if obj["kind"] != "MutatingWebhookConfiguration"]
    # Same name as the harness's configuration (kgov-governor): it replaces it, and the governor
    # fixture removes it at the end.
    await apply_all(dynamic, registration)
    try:

        async def labelled() -> dict[str, Any] | None:
            name = f"fault-alive-{secrets.token_hex(3)}"
            try:
                created = (await support.create_with_warnings(dynamic, unlabelled_job(name), dry_run=True)).obj
            except support.Refused:
                return None  # the policies' informer not caught up yet
            return created if (created["metadata"].get("labels") or {}).get(QUEUE_LABEL) == RESEARCH_QUEUE else None

        await support.wait_for(labelled, "the chart's configuration to call kgov serve", timeout=30)
        alive = cleanup.add(await support.create(dynamic, unlabelled_job(f"fault-alive-{secrets.token_hex(3)}")))
        assert alive["metadata"]["labels"][QUEUE_LABEL] == RESEARCH_QUEUE

        assert devcluster.stop_process(paths, "governor", signum=signal.SIGKILL)

        async def refused_dry_run() -> bool:
            # The API server's policy informer takes the just-applied ValidatingAdmissionPolicies
            # up within seconds; a dry run stores nothing if it is not there yet.
            try:
                await support.create_with_warnings(dynamic, unlabelled_job(f"fault-probe-{secrets.token_hex(3)}"), True)
            except support.Refused:
                return True
            return False

        await support.wait_for(refused_dry_run, "a dry-run create to be refused with the webhook down", timeout=30)
        name = f"fault-down-{secrets.token_hex(3)}"
        with pytest.raises(support.Refused) as refused:
            await support.create_with_warnings(dynamic, unlabelled_job(name))
        message = refused.value.status["message"]
        if failure_policy == "Fail":
            assert refused.value.status["code"] == 500
            assert f'failed calling webhook "{WEBHOOK}"' in message
            assert f"{url}/mutate" in message and "connection refused" in message
        else:
            assert refused.value.status["code"] == 403
            assert "ValidatingAdmissionPolicy 'kgov-governor-queue-research'" in message
            assert (
                f'kueue-governor: a workload in a namespace of team "research" needs the label {QUEUE_LABEL} '
                f"set to one of {RESEARCH_QUEUE}" in message
            )
        jobs = await support.list_objects(dynamic, "batch/v1", "Job", RESEARCH)
        assert name not in {job["metadata"]["name"] for job in jobs}
        assert [
            j["metadata"]["name"] for j in jobs if (j["metadata"].get("labels") or {}).get(QUEUE_LABEL) is None
        ] == []
    finally:
        await delete_all(dynamic, policies)
