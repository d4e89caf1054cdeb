"""The CRD defaults ``kgov mutate`` and ``kgov review`` apply (``webhook/core/kueue/crd_defaults.json``)
are the API server's: the file matches the CRD files of the modules Kueue pins (``make
crd-defaults-check``, needs Go), and each default it fills into a sample of every served kind is
the value the real API server stores (server-side dry run, in a namespace of no team)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes_asyncio.dynamic import DynamicClient

from e2e.crd_defaults import check
from e2e.support import create_with_warnings
from e2e.test_kueue_view import samples, served
from webhook.core.kueue.crd_defaults import with_crd_defaults
from webhook.core.objects.paths import Key, lookup

pytestmark = pytest.mark.e2e


def test_the_checked_in_crd_defaults_match_the_pinned_crds() -> None:
    diff = check()
    assert diff == [], "\n".join(diff[:40]) + "\nrun `make crd-defaults`"


def added(given: Any, filled: Any, path: tuple[Key, ...] = ()) -> list[tuple[tuple[Key, ...], Any]]:
    """The leaves ``filled`` has and ``given`` lacks (or has as null)."""
    if isinstance(filled, dict):
        mine = given if isinstance(given, dict) else {}
        out = []
        for key, value in filled.items():
            if mine.get(key) is None and value is not None:
                out.append(((*path, key), value))
            else:
                out += added(mine.get(key), value, (*path, key))
        return out
    if isinstance(filled, list) and isinstance(given, list):
        return [leaf for i, (a, b) in enumerate(zip(given, filled, strict=True)) for leaf in added(a, b, (*path, i))]
    return []


def bare_ray_job() -> dict[str, Any]:
    """A RayJob without submissionMode whose worker group sets none of its counts."""
    body = copy.deepcopy(samples()["RayJob"])
    del body["spec"]["submissionMode"]
    group = body["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    for key in ("replicas", "minReplicas", "maxReplicas", "numOfHosts"):
        del group[key]
    return body


@pytest.mark.parametrize("kind", [*sorted(samples()), "RayJob-bare"])
async def test_each_default_we_fill_is_the_one_the_api_server_stores(
    dynamic: DynamicClient, namespace: str, kind: str
) -> None:
    body = bare_ray_job() if kind == "RayJob-bare" else samples()[kind]
    if not await served(dynamic, body["apiVersion"], body["kind"]):
        pytest.skip(f"{body['apiVersion']} {body['kind']} is not served by this API server")
    body["metadata"]["namespace"] = namespace
    ours = added(body, with_crd_defaults(body))
    stored = (await create_with_warnings(dynamic, body, dry_run=True)).obj
    print(f"\n{kind}: {len(ours)} defaults filled offline: {ours}")
    assert [(path, lookup(stored, path)) for path, _ in ours] == ours
    if kind == "RayJob-bare":
        assert len(ours) == 7 and stored["spec"]["submissionMode"] == "K8sJobMode"
