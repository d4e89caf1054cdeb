"""The unit tests' recorded fixtures still look like what the real API server sends.

Records afresh, as ``make record-reviews`` does (:mod:`e2e.record`), and compares with the committed
files: every AdmissionReview of ``tests/data/admission`` is about the same thing (apiVersion, kind,
resource, operation, dryRun) and has the same shape (every map key, list length and JSON type) as
the one the API server sent now; the live objects of ``tests/data/live`` carry the same values in
every field ``kgov diff`` compares. A failure means the fixtures are stale: run ``make
record-reviews``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from e2e import record, support
from e2e.conftest import E2ECluster, GovernorInfo
from webhook.core.platform.platform import load_platform
from webhook.generate.live import project
from webhook.generate.manifests import GenerateOptions, build_manifests, object_key

pytestmark = pytest.mark.e2e


def shape_differences(committed: Any, fresh: Any, path: str = "") -> list[str]:
    """Where two shapes (:func:`e2e.record.shape`) differ, as ``path: committed … now …`` lines."""
    if isinstance(committed, dict) and isinstance(fresh, dict):
        out = [f"{path}.{key}: only in the committed file" for key in committed.keys() - fresh.keys()]
        out += [f"{path}.{key}: only in the API server's" for key in fresh.keys() - committed.keys()]
        for key in committed.keys() & fresh.keys():
            out += shape_differences(committed[key], fresh[key], f"{path}.{key}")
        return sorted(out)
    if isinstance(committed, list) and isinstance(fresh, list):
        if len(committed) != len(fresh):
            return [f"{path}: {len(committed)} items committed, {len(fresh)} now"]
        pairs = enumerate(zip(committed, fresh, strict=True))
        return [line for index, (a, b) in pairs for line in shape_differences(a, b, f"{path}[{index}]")]
    return [] if committed == fresh else [f"{path}: committed {committed!r}, now {fresh!r}"]


def test_shape_differences_names_each_path() -> None:
    assert shape_differences(record.shape({"a": [1, {"b": "x"}]}), record.shape({"a": [2, {"b": "y"}]})) == []
    committed, fresh = record.shape({"a": [1, {"b": "x"}], "c": 1}), record.shape({"a": [1, {"b": 2}], "d": None})
    assert shape_differences(committed, fresh) == [
        ".a[1].b: committed 'string', now 'number'",
        ".c: only in the committed file",
        ".d: only in the API server's",
    ]


@pytest.fixture
def local_cluster(e2e_cluster: E2ECluster) -> E2ECluster:
    if e2e_cluster.local is None:
        pytest.skip("the recording webhook listens on 127.0.0.1, which only a local API server can call")
    return e2e_cluster


async def test_committed_admission_reviews_match_what_the_api_server_sends(
    local_cluster: E2ECluster, bundled_governor: GovernorInfo
) -> None:
    raw = await record.record_reviews(local_cluster.kubeconfig)
    fresh = record.scrub({name: review for name, review in raw.items()})
    directory = record.DATA / "admission"
    committed = {path.name: json.loads(path.read_text()) for path in sorted(directory.glob("*.json"))}
    assert sorted(committed) == sorted(fresh) == sorted(record.REVIEWS)
    for name in sorted(fresh):
        assert record.review_identity(committed[name]) == record.review_identity(fresh[name]), name
        assert shape_differences(record.shape(committed[name]), record.shape(fresh[name])) == [], name
    # A user's CREATE does not depend on the cluster's state: what the API server makes of it
    # (defaults, managedFields, options) is exactly what was recorded.
    for name in ("v1-job-create.json", "v1-job-create-dryrun.json", "v1beta1-jobset-create.json"):
        assert fresh[name] == committed[name], name
    # What the governor decides on does not depend on the scrubbing: the v1beta1 envelope, the
    # dry-run flag and the refused queue are the API server's own values.
    assert fresh["v1beta1-jobset-create.json"]["apiVersion"] == "admission.k8s.io/v1beta1"
    assert fresh["v1-job-create-dryrun.json"]["request"]["dryRun"] is True
    assert fresh["v1-job-create.json"]["request"]["dryRun"] is False


async def test_committed_live_objects_match_what_the_api_server_returns(
    local_cluster: E2ECluster, bundled_config: support.Generated
) -> None:
    platform = record.DATA / record.LIVE_PLATFORM
    assert platform.read_text() == support.BUNDLED_PLATFORM.read_text(), (
        f"{platform} is not kueue-config/platform.yaml any more: run `make record-reviews`"
    )
    fresh = await record.record_live_objects(local_cluster.kubeconfig, support.BUNDLED_PLATFORM)
    committed = json.loads((record.DATA / record.LIVE_OBJECTS).read_text())
    desired = {
        object_key(obj): obj
        for objects in build_manifests(load_platform(platform), GenerateOptions(namespaces=True)).values()
        for obj in objects
    }
    assert [object_key(obj) for obj in committed] == [object_key(obj) for obj in fresh] == list(desired)
    for old, new in zip(committed, fresh, strict=True):
        # Every field kgov diff compares holds the same value now as when recorded …
        assert project(old, desired[object_key(old)]) == project(new, desired[object_key(new)]), object_key(old)
        # … and metadata and spec have the same shape (server defaults included).
        for part in ("metadata", "spec"):
            before, after = dict(old.get(part) or {}), dict(new.get(part) or {})
            before.pop("managedFields", None)
            after.pop("managedFields", None)
            assert shape_differences(record.shape(before), record.shape(after)) == [], (object_key(old), part)
