"""Kueue's own example manifests, created after our mutation: the API server and Kueue accept them.

Every document of ``../shared/cases/kueue-examples`` (Kueue's ``site/static/examples``) whose kind
this API server serves, with its ``kueue.x-k8s.io/*`` labels and annotations stripped (what a user
who never heard of Kueue would write) and, if namespaced, put in ``hyperpod-ns-research``, goes
through a server-side dry-run create (``dryRun=All``): every admission webhook runs, ours and
Kueue's validating ones included, and nothing is stored. Workload kinds must come back with the
research team's queue, priority and placement; every other kind must come back untouched by us.

A document refused in the research namespace is also tried in a namespace of no team (where we
change nothing): if it is refused there too, the example itself does not fit this cluster (a
schema or a controller's defaulting webhook that is not installed) and the case is skipped with
the API server's reason; if it is accepted there, our mutation broke it and the test fails.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.dynamic import DynamicClient
from kubernetes_asyncio.dynamic.exceptions import ResourceNotFoundError

from e2e import manifests
from e2e.support import (
    REPO,
    Refused,
    create,
    create_with_warnings,
    get,
    load_yaml_documents,
    strip_kueue,
    wait_default_service_account,
)
from webhook.core.kueue.kinds import find_kind
from webhook.core.kueue.view import kueue_view
from webhook.core.objects.paths import lookup

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("bundled_governor")]

CASES = REPO.parent / "shared" / "cases" / "kueue-examples"
RESEARCH = "hyperpod-ns-research"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
LEVEL_ANNOTATIONS = (
    "kueue.x-k8s.io/podset-required-topology",
    "kueue.x-k8s.io/podset-preferred-topology",
    "kueue.x-k8s.io/podset-unconstrained-topology",
)
INSTANCE_TYPE_EXPRESSION = {"key": manifests.INSTANCE_TYPE_LABEL, "operator": "In", "values": ["p5.48xlarge"]}
NO_TEAM_NAMESPACE = "kgov-e2e-no-team"

# Cases Kueue refuses once it manages them: the governor denies them with its own message rather
# than turning an accepted object into one Kueue's webhook refuses.
DENIED_BY_GOVERNOR = {
    "jobs/ray-job-autoscaling-sample.yaml#0": (
        "kueue-governor: queue: Kueue refuses a RayJob with spec.rayClusterSpec.enableInTreeAutoscaling: true"
    ),
}

# Cases refused here once Kueue manages them, for want of a controller this cluster lacks; skipped
# only after checking that Kueue's example as written (its own queue label) is refused here too.
NEEDS_MISSING_CONTROLLER = {
    "serving-workloads/sample-leaderworkerset.yaml#0": (
        "Kueue's LeaderWorkerSet webhook leaves spec.rolloutStrategy.type empty for the LWS "
        "controller's defaulting webhook to fill, and no LWS controller is installed here"
    ),
    "serving-workloads/sample-leaderworkerset-tas.yaml#0": "same as sample-leaderworkerset.yaml#0",
}


def _documents() -> list[Any]:
    if not CASES.is_dir():
        return [pytest.param("", 0, marks=pytest.mark.skip(reason=f"the Kueue example cases are not at {CASES}"))]
    params = []
    for path in sorted(CASES.glob("**/*.yaml")):
        for index, _ in enumerate(load_yaml_documents(path)):
            case = f"{path.relative_to(CASES)}#{index}"
            params.append(pytest.param(str(path.relative_to(CASES)), index, id=case))
    return params


@pytest.fixture
async def no_team_namespace(dynamic: DynamicClient) -> str:
    """A namespace no team owns (so the governor changes nothing there), with a ServiceAccount."""
    if await get(dynamic, "v1", "Namespace", NO_TEAM_NAMESPACE) is None:
        await create(dynamic, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NO_TEAM_NAMESPACE}})
    await wait_default_service_account(dynamic, NO_TEAM_NAMESPACE)
    return NO_TEAM_NAMESPACE


@pytest.mark.parametrize(("name", "index"), _documents())
async def test_example_is_accepted_after_our_mutation(
    dynamic: DynamicClient, no_team_namespace: str, name: str, index: int
) -> None:
    document = load_yaml_documents(CASES / name)[index]
    api_version, kind = str(document.get("apiVersion", "")), str(document.get("kind", ""))
    try:
        resource = await dynamic.resources.get(api_version=api_version, kind=kind)
    except ResourceNotFoundError:
        pytest.skip(f"{api_version} {kind} is not served by this API server (its CRD is not installed)")
    body = strip_kueue(document)
    if resource.namespaced:
        body["metadata"]["namespace"] = RESEARCH

    try:
        result = (await create_with_warnings(dynamic, body, dry_run=True)).obj
    except Refused as refused:
        message = refused.status.get("message")
        expected_denial = DENIED_BY_GOVERNOR.get(f"{name}#{index}")
        if expected_denial is not None:
            assert expected_denial in str(message), message
            return
        if not resource.namespaced:
            pytest.skip(f"refused, and we never touch a cluster-scoped {kind}: {message}")
        untouched = {**body, "metadata": {**body["metadata"], "namespace": no_team_namespace}}
        try:
            await create_with_warnings(dynamic, untouched, dry_run=True)
        except Refused as baseline:
            pytest.skip(f"the example is refused without our mutation too: {baseline.status.get('message')}")
        limit = NEEDS_MISSING_CONTROLLER.get(f"{name}#{index}")
        if limit is not None:
            as_written = {**document, "metadata": {**document["metadata"], "namespace": no_team_namespace}}
            try:
                await create_with_warnings(dynamic, as_written, dry_run=True)
            except Refused as kueue_managed:
                pytest.skip(f"{limit}; Kueue's own example is refused too: {kueue_managed.status.get('message')}")
        raise AssertionError(
            f"{name} document {index} ({kind}) is accepted as written but refused after our mutation: {message}"
        ) from None

    row = find_kind(api_version, kind)
    if row is None or not resource.namespaced:
        # Not a workload kind: we leave it alone (Kueue's own objects, ConfigMaps, Namespaces…).
        assert QUEUE_LABEL not in ((result.get("metadata") or {}).get("labels") or {})
        return
    labels = lookup(result, (*row.labels_at, "labels")) or {}
    assert labels.get(QUEUE_LABEL) == "hyperpod-ns-research-localqueue", labels
    assert labels.get(PRIORITY_LABEL) == "training-priority", labels
    if row.suspend is not None:
        assert lookup(result, row.suspend) is True, f"{kind} not suspended at {'.'.join(row.suspend)}"
    # Podsets with a template of their own (not a RayJob's default submitter, which Kueue assumes).
    originals = {ref.path: ref.base for ref in kueue_view(body, row).podsets if ref.present}
    templates = [ref for ref in kueue_view(result, row).podsets if ref.present]
    assert len(templates) == len(originals), "the API server returned other pod templates than were sent"
    for ref in templates:
        where = f"podset {ref.name} at {'.'.join(map(str, ref.path)) or '<object>'}"
        annotations = (ref.base.get("metadata") or {}).get("annotations") or {}
        assert len([key for key in LEVEL_ANNOTATIONS if key in annotations]) == 1, f"{where}: {annotations}"
        spec = ref.base.get("spec") or {}
        original = originals[ref.path].get("spec") or {}
        if not ref.path:
            # A bare Pod: the API server's Priority admission plugin runs before the webhooks and
            # sets spec.priority (0 without a default PriorityClass); a Pod with spec.priority is
            # left alone (SPEC §3), as adding priorityClassName now would contradict it.
            assert spec.get("priority") == 0 and "priorityClassName" not in spec, where
        elif original.get("priorityClassName") is None and original.get("priority") is None:
            assert spec.get("priorityClassName") == "training-priority", where
        terms = lookup(spec, ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"))
        assert terms is not None, f"{where}: no required node affinity"
        for term in terms["nodeSelectorTerms"]:
            assert INSTANCE_TYPE_EXPRESSION in term["matchExpressions"], f"{where}: {term}"
