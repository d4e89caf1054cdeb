"""Helpers for e2e tests: polling, Kueue objects, Kueue's topology assignments, admission outcomes
(warnings, denials, an object's history), cleanup of workloads, reading the node shape, and the
pause-container Jobs the tests submit."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes_asyncio import watch
from kubernetes_asyncio.dynamic import DynamicClient
from kubernetes_asyncio.dynamic.exceptions import ConflictError, DynamicApiError, NotFoundError

T = TypeVar("T")

KUEUE_API = "kueue.x-k8s.io/v1beta2"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
GPU = "nvidia.com/gpu"


class WaitTimeout(AssertionError):
    """A condition did not hold in time; the message carries what was awaited."""


async def wait_for(
    probe: Callable[[], Awaitable[T | None]],
    what: str,
    timeout: float = 30.0,
    interval: float = 0.25,
) -> T:
    """Await ``probe()`` until it returns something other than None (or False); return it.

    Raises:
        WaitTimeout: ``timeout`` seconds passed; the message names ``what``.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = await probe()
        if result is not None and result is not False:
            return result
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(interval)


async def create(dynamic: DynamicClient, body: dict[str, Any]) -> dict[str, Any]:
    """Create any object (kind found by discovery); return it as the API server stored it."""
    resource = await dynamic.resources.get(api_version=body["apiVersion"], kind=body["kind"])
    namespace = body["metadata"].get("namespace")
    created = await dynamic.create(resource, body=body, namespace=namespace)
    return dict(created.to_dict())


async def get(
    dynamic: DynamicClient, api_version: str, kind: str, name: str, namespace: str | None = None
) -> dict[str, Any] | None:
    """One object as a dict, or None when it does not exist."""
    resource = await dynamic.resources.get(api_version=api_version, kind=kind)
    try:
        found = await dynamic.get(resource, name=name, namespace=namespace)
    except NotFoundError:
        return None
    return dict(found.to_dict())


async def list_objects(
    dynamic: DynamicClient,
    api_version: str,
    kind: str,
    namespace: str | None = None,
    label_selector: str | None = None,
) -> list[dict[str, Any]]:
    """All objects of a kind (in ``namespace``, or cluster-wide; those ``label_selector``
    selects, e.g. ``"app=x"``), as dicts."""
    resource = await dynamic.resources.get(api_version=api_version, kind=kind)
    found = await dynamic.get(resource, namespace=namespace, label_selector=label_selector)
    return [dict(item) for item in found.to_dict()["items"]]


async def delete(dynamic: DynamicClient, body: dict[str, Any]) -> None:
    """Delete the object ``body`` names, its dependents (a Job's pods and Workload…) by the
    garbage collector in the background; one that is already gone is fine.

    Background is stated because batch/v1 Jobs would otherwise orphan their pods.
    """
    resource = await dynamic.resources.get(api_version=body["apiVersion"], kind=body["kind"])
    with contextlib.suppress(NotFoundError):
        await dynamic.delete(
            resource,
            name=body["metadata"]["name"],
            namespace=body["metadata"].get("namespace"),
            propagation_policy="Background",
        )


async def workload_for(dynamic: DynamicClient, namespace: str, owner_uid: str) -> dict[str, Any] | None:
    """The Workload Kueue created for the object with uid ``owner_uid``, if there is one yet."""
    for workload in await list_objects(dynamic, KUEUE_API, "Workload", namespace):
        owners = workload["metadata"].get("ownerReferences", [])
        if any(owner.get("uid") == owner_uid for owner in owners):
            return workload
    return None


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The status condition of type ``kind`` of an object dict, if present."""
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            return dict(item)
    return None


def is_true(obj: dict[str, Any], kind: str) -> bool:
    """Whether the condition ``kind`` is ``True``."""
    found = condition(obj, kind)
    return found is not None and found.get("status") == "True"


@dataclass(frozen=True)
class Domain:
    """One topology domain of an assignment: label values from the broadest level, and pods."""

    values: tuple[str, ...]
    pods: int


def decode_topology_assignment(assignment: dict[str, Any]) -> tuple[list[str], list[Domain]]:
    """Expand Kueue's compressed v1beta2 ``topologyAssignment`` into plain domains.

    Each slice covers ``domainCount`` domains; per level a value is either ``universal`` (the
    same for all) or ``individual`` (``prefix + root + suffix``, one root per domain); pod counts
    are ``universal`` or ``individual`` likewise.

    Returns:
        ``(levels, domains)``: the node label keys, broadest first, and one :class:`Domain`
        per assigned domain.
    """
    levels = list(assignment["levels"])
    domains: list[Domain] = []
    for piece in assignment.get("slices", []):
        count = int(piece["domainCount"])
        columns: list[list[str]] = []
        for level_values in piece["valuesPerLevel"]:
            if "universal" in level_values:
                columns.append([level_values["universal"]] * count)
            else:
                individual = level_values["individual"]
                prefix, suffix = individual.get("prefix") or "", individual.get("suffix") or ""
                columns.append([f"{prefix}{root}{suffix}" for root in individual["roots"]])
        pod_counts = piece["podCounts"]
        pods = [int(pod_counts["universal"])] * count if "universal" in pod_counts else pod_counts["individual"]
        for index in range(count):
            domains.append(Domain(tuple(column[index] for column in columns), int(pods[index])))
    return levels, domains


# --------------------------------------------------------------------------- admission outcomes


@dataclass(frozen=True)
class Created:
    """What a create call returned: the object as stored (or as dry-run would store it) and the
    API server's ``Warning`` headers (admission webhook warnings arrive there)."""

    obj: dict[str, Any]
    warnings: list[str]


def _warning_text(header: str) -> str:
    """The text of one RFC 7234 ``Warning`` header as the API server sends it: ``299 - "text"``."""
    code, _, rest = header.partition(" ")
    _agent, _, quoted = rest.partition(" ")
    if code.isdigit() and quoted.startswith('"') and quoted.endswith('"'):
        return quoted[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return header


class Refused(Exception):
    """The API server refused a request; ``status`` is its ``Status`` object (code, reason, message),
    ``warnings`` the ``Warning`` headers of the refusal (a mutating webhook's warnings arrive even
    when a later validating webhook refuses the object)."""

    def __init__(self, status: dict[str, Any], warnings: list[str] | None = None) -> None:
        super().__init__(f"{status.get('code')} {status.get('reason')}: {status.get('message')}")
        self.status = status
        self.warnings = warnings or []


async def create_with_warnings(dynamic: DynamicClient, body: dict[str, Any], dry_run: bool = False) -> Created:
    """Create ``body`` (``dryRun=All`` with ``dry_run``); return the stored object and the warnings.

    Raises:
        Refused: the API server refused it (a webhook denial is a 403 whose message names the webhook).
    """
    resource = await dynamic.resources.get(api_version=body["apiVersion"], kind=body["kind"])
    namespace = body["metadata"].get("namespace") if resource.namespaced else None
    # serialize=False: the raw response, whose headers carry the warnings (and which does not
    # raise on an error status).
    try:
        response = await dynamic.create(
            resource, body=body, namespace=namespace, dry_run="All" if dry_run else None, serialize=False
        )
    except DynamicApiError as error:  # a client that raises on an error status
        headers = error.headers.getall("Warning", []) if error.headers is not None else []
        raise Refused(json.loads(error.body or "{}"), [_warning_text(header) for header in headers]) from None
    try:
        headers = response.headers.getall("Warning", [])
        obj = await response.json()
    finally:
        response.release()
    warnings = [_warning_text(header) for header in headers]
    if response.status >= 400:
        raise Refused(dict(obj), warnings)
    return Created(obj=dict(obj), warnings=warnings)


async def dry_run_attempt(dynamic: DynamicClient, body: dict[str, Any]) -> Created | Refused:
    """A dry-run create of ``body``: what the API server answered, created (with its warnings) or refused."""
    try:
        return await create_with_warnings(dynamic, body, dry_run=True)
    except Refused as refused:
        return refused


def tas_findings(warnings: list[str]) -> list[str]:
    """The governor's findings on TAS annotations among an answer's warnings (those naming Kueue v0.19.2)."""
    return [w.removeprefix("kueue-governor: topology: ") for w in warnings if "(Kueue v0.19.2 " in w]


async def replace_with_warnings(dynamic: DynamicClient, body: dict[str, Any], dry_run: bool = False) -> Created:
    """Replace (PUT) ``body`` (``dryRun=All`` with ``dry_run``); return the stored object and the warnings.

    Raises:
        Refused: the API server refused it, with the warnings of the refusal.
        ConflictError: ``body``'s resourceVersion is not the stored one.
    """
    resource = await dynamic.resources.get(api_version=body["apiVersion"], kind=body["kind"])
    namespace = body["metadata"].get("namespace") if resource.namespaced else None
    try:
        response = await dynamic.replace(
            resource, body=body, namespace=namespace, dry_run="All" if dry_run else None, serialize=False
        )
    except ConflictError:
        raise
    except DynamicApiError as error:
        headers = error.headers.getall("Warning", []) if error.headers is not None else []
        raise Refused(json.loads(error.body or "{}"), [_warning_text(header) for header in headers]) from None
    try:
        warnings = [_warning_text(header) for header in response.headers.getall("Warning", [])]
        obj = await response.json()
    finally:
        response.release()
    if response.status >= 400:
        raise Refused(dict(obj), warnings)
    return Created(obj=dict(obj), warnings=warnings)


async def resource_version(dynamic: DynamicClient, api_version: str, kind: str, namespace: str | None) -> str:
    """The list resourceVersion of a kind now: a watch from it replays every later change."""
    resource = await dynamic.resources.get(api_version=api_version, kind=kind)
    listed = await dynamic.get(resource, namespace=namespace, limit=1)
    return str(listed.to_dict()["metadata"]["resourceVersion"])


async def history(
    dynamic: DynamicClient,
    body: dict[str, Any],
    since: str,
    until: Callable[[dict[str, Any]], bool],
    timeout: float = 30.0,
) -> list[dict[str, Any]]:
    """Every version of the object ``body`` names, from resourceVersion ``since`` on, as a watch
    delivers them, up to and including the first for which ``until`` holds.

    The watch replays changes made before it was opened, so no version in between is missed.
    """
    resource = await dynamic.resources.get(api_version=body["apiVersion"], kind=body["kind"])
    versions: list[dict[str, Any]] = []
    watcher = watch.Watch()

    async def collect() -> None:
        async for event in dynamic.watch(
            resource,
            namespace=body["metadata"].get("namespace"),
            name=body["metadata"]["name"],
            resource_version=since,  # type: ignore[arg-type]  # typed int; the API takes the string
            timeout=int(timeout) + 5,
            watcher=watcher,
        ):
            if event["type"] in ("ADDED", "MODIFIED"):
                versions.append(dict(event["raw_object"]))
                if until(versions[-1]):
                    return

    try:
        await asyncio.wait_for(collect(), timeout)
    except TimeoutError:
        raise WaitTimeout(
            f"timed out after {timeout:.0f}s watching {body['kind']} {body['metadata']['name']} "
            f"({len(versions)} versions seen)"
        ) from None
    finally:
        watcher.stop()
        await watcher.close()
    return versions


async def delete_workload_object(dynamic: DynamicClient, body: dict[str, Any], timeout: float = 90.0) -> None:
    """Delete a workload object (background propagation) and wait until the garbage collector
    has removed the Kueue Workloads it owns, so their quota and topology capacity are free for
    the next test.

    Raises:
        TimeoutError: an owned Workload is still there after ``timeout`` seconds.
    """
    namespace = body["metadata"].get("namespace")
    current = await get(dynamic, body["apiVersion"], body["kind"], body["metadata"]["name"], namespace)
    if current is None:
        return
    uid = current["metadata"]["uid"]
    resource = await dynamic.resources.get(api_version=body["apiVersion"], kind=body["kind"])
    with contextlib.suppress(NotFoundError):
        await dynamic.delete(
            resource, name=body["metadata"]["name"], namespace=namespace, propagation_policy="Background"
        )

    async def owned_workloads_gone() -> bool:
        return not [
            workload
            for workload in await list_objects(dynamic, KUEUE_API, "Workload", namespace)
            if any(owner.get("uid") == uid for owner in workload["metadata"].get("ownerReferences", []))
        ]

    await wait_for(owned_workloads_gone, f"the Workloads of {body['kind']} {body['metadata']['name']} to go", timeout)


class Cleanup:
    """Workload objects a test created; :meth:`run` deletes them with their Workloads."""

    def __init__(self, dynamic: DynamicClient) -> None:
        self.dynamic = dynamic
        self.objects: list[dict[str, Any]] = []

    def add(self, body: dict[str, Any]) -> dict[str, Any]:
        """Remember ``body`` (apiVersion, kind, metadata.name/namespace suffice); returns it."""
        self.objects.append(body)
        return body

    async def run(self) -> None:
        objects, self.objects = self.objects, []
        await asyncio.gather(*(delete_workload_object(self.dynamic, body) for body in objects))


# --------------------------------------------------------------------------- manifests and nodes


def load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    """The non-empty documents of a YAML file that are maps."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if isinstance(doc, dict)]


def strip_kueue(obj: Any) -> Any:
    """A deep copy with every ``kueue.x-k8s.io/*`` label and annotation removed, at any depth."""
    out = copy.deepcopy(obj)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key in ("labels", "annotations"):
                value = node.get(key)
                if isinstance(value, dict):
                    for name in [name for name in value if str(name).startswith("kueue.x-k8s.io/")]:
                        del value[name]
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(out)
    return out


def is_ready_schedulable(node: dict[str, Any]) -> bool:
    """Ready=True, not cordoned, no NoSchedule/NoExecute taint: a node Kueue's TAS counts."""
    conditions = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
    spec = node.get("spec") or {}
    tainted = any(t.get("effect") in ("NoSchedule", "NoExecute") for t in spec.get("taints") or [])
    return conditions.get("Ready") == "True" and not spec.get("unschedulable") and not tainted


def narrowest_level_holding(
    nodes: list[dict[str, Any]],
    levels: list[str],
    node_labels: dict[str, str],
    pods: int,
    resource: str,
    per_pod: int,
    broadest: str | None = None,
) -> str | None:
    """The narrowest of ``levels`` (broadest first; none broader than ``broadest`` when given) with
    one domain whose nodes hold ``pods`` pods of ``per_pod`` ``resource`` each, counting the
    allocatable of Ready nodes carrying ``node_labels``.

    None when no domain of those levels holds them. An independent reading of the node shape, to
    check the level ``topology: auto`` picked.
    """
    top = levels.index(broadest) if broadest in levels else 0
    eligible = [
        node
        for node in nodes
        if is_ready_schedulable(node)
        and all((node["metadata"].get("labels") or {}).get(key) == value for key, value in node_labels.items())
    ]
    for depth in range(len(levels) - 1, top - 1, -1):
        capacity: dict[tuple[str, ...], int] = {}
        for node in eligible:
            labels = node["metadata"].get("labels") or {}
            domain = tuple(labels.get(level, "") for level in levels[: depth + 1])
            if all(domain):
                allocatable = int(str((node.get("status") or {}).get("allocatable", {}).get(resource, "0")))
                capacity[domain] = capacity.get(domain, 0) + allocatable // per_pod
        if capacity and max(capacity.values()) >= pods:
            return levels[depth]
    return None


# --------------------------------------------------------------------------- the governor's metrics


def read_metrics(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """``GET <url>/metrics`` of ``kgov serve``'s plain-HTTP metrics port: (sample name, labels) → value."""
    from prometheus_client.parser import text_string_to_metric_families

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): float(sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def admission_count(
    metrics: dict[tuple[str, frozenset[tuple[str, str]]], float], kind: str, operation: str, result: str | None = None
) -> int:
    """``kgov_admission_requests_total`` for one kind and operation (one result, or all)."""
    total = 0.0
    for (name, labels), value in metrics.items():
        found = dict(labels)
        if (
            name == "kgov_admission_requests_total"
            and found.get("kind") == kind
            and found.get("operation") == operation
            and (result is None or found.get("result") == result)
        ):
            total += value
    return int(total)


# --------------------------------------------------------------------------- kgov generate


REPO = Path(__file__).resolve().parents[1]
BUNDLED_PLATFORM = REPO / "kueue-config" / "platform.yaml"
FIELD_MANAGER = "kgov-e2e"


def kgov_command() -> list[str]:
    """How to run ``kgov``: the script next to this interpreter, on PATH, or the module."""
    for candidate in (Path(sys.executable).parent / "kgov", shutil.which("kgov")):
        if candidate and Path(candidate).is_file():
            return [str(candidate)]
    return [sys.executable, "-c", "import sys; from webhook.cli import main; sys.exit(main())"]


def kgov_review(options: list[str], body: dict[str, Any]) -> dict[str, Any]:
    """The response of ``kgov review OPTIONS`` (the server's code path) to the AdmissionReview
    ``body``; fails the test when kgov exits non-zero (with its stderr)."""
    result = subprocess.run(
        [*kgov_command(), "review", *options],
        input=json.dumps(body),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout)["response"])


@dataclass(frozen=True)
class Generated:
    """What ``kgov generate --namespaces`` wrote: its directory and objects in kustomization order."""

    directory: Path
    objects: list[dict[str, Any]]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [obj for obj in self.objects if obj["kind"] == kind]

    @property
    def team_namespaces(self) -> list[str]:
        """Generated namespaces that belong to a team (not the webhook's own)."""
        return [
            obj["metadata"]["name"]
            for obj in self.of_kind("Namespace")
            if "kueue-governor.io/team" in (obj["metadata"].get("labels") or {})
        ]

    def local_queue(self, namespace: str) -> dict[str, Any]:
        """The one generated LocalQueue of a team namespace."""
        (queue,) = [q for q in self.of_kind("LocalQueue") if q["metadata"]["namespace"] == namespace]
        return queue


def generate(platform: Path, output: Path, *options: str) -> Generated:
    """Run ``kgov generate PLATFORM --namespaces -o OUTPUT [options]`` (the real command line).

    Raises:
        AssertionError: the command failed (its stderr is in the message).
    """
    result = subprocess.run(
        [*kgov_command(), "generate", str(platform), "--namespaces", "--out", str(output), *options],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, f"kgov generate {platform} failed ({result.returncode}):\n{result.stderr}"
    kustomization = yaml.safe_load((output / "kustomization.yaml").read_text())
    objects = [doc for name in kustomization["resources"] for doc in load_yaml_documents(output / name)]
    return Generated(directory=output, objects=objects)


async def apply_generated(dynamic: DynamicClient, generated: Generated) -> None:
    """Server-side apply every generated object, as ``kubectl apply --server-side -k`` would.

    The namespace of the policy ConfigMap (the webhook's own, not generated) is created first
    when missing; then it waits for the ``default`` ServiceAccount of each team namespace (made
    by the service-account controller; Pods need it).
    """
    for namespace in sorted(
        {obj["metadata"]["namespace"] for obj in generated.objects if obj["kind"] == "ConfigMap"}
        - set(generated.team_namespaces)
    ):
        await _apply(dynamic, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for obj in generated.objects:
        await _apply(dynamic, obj)
    for namespace in generated.team_namespaces:
        await wait_default_service_account(dynamic, namespace)


async def wait_default_service_account(dynamic: DynamicClient, namespace: str, timeout: float = 60.0) -> None:
    """Wait for the ``default`` ServiceAccount the service-account controller makes in a new
    namespace (the API server refuses a Pod whose ServiceAccount does not exist yet)."""

    async def exists() -> bool:
        return await get(dynamic, "v1", "ServiceAccount", "default", namespace) is not None

    await wait_for(exists, f"the default ServiceAccount of {namespace}", timeout)


async def _apply(dynamic: DynamicClient, body: dict[str, Any]) -> None:
    resource = await dynamic.resources.get(api_version=body["apiVersion"], kind=body["kind"])
    await dynamic.server_side_apply(resource, body, field_manager=FIELD_MANAGER, force_conflicts=True)


async def wait_cluster_queues_active(dynamic: DynamicClient, names: list[str], timeout: float = 60.0) -> None:
    """Wait until every named ClusterQueue reports ``Active=True``."""
    wanted = set(names)

    async def all_active() -> bool:
        queues = await list_objects(dynamic, KUEUE_API, "ClusterQueue")
        active = {q["metadata"]["name"] for q in queues if is_true(q, "Active")}
        return wanted <= active

    await wait_for(all_active, f"{len(wanted)} ClusterQueues to become Active", timeout)


def pause_pod_spec(
    gpus: int, cpu: str, memory: str | None = None, restart_policy: str | None = "Never"
) -> dict[str, Any]:
    """A pod spec of one container ``main`` running :data:`PAUSE_IMAGE` that requests ``cpu``,
    ``memory`` (when given) and ``gpus`` GPUs, with a GPU limit equal to the request; its
    ``restartPolicy`` is ``restart_policy`` (none when None)."""
    requests = {"cpu": cpu, **({"memory": memory} if memory is not None else {}), GPU: str(gpus)}
    container = {"name": "main", "image": PAUSE_IMAGE, "resources": {"requests": requests, "limits": {GPU: str(gpus)}}}
    return {**({"restartPolicy": restart_policy} if restart_policy is not None else {}), "containers": [container]}


def job_manifest(
    name: str, namespace: str, pods: int, template: dict[str, Any], labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A batch/v1 Job of ``pods`` pods at once (parallelism = completions = ``pods``) from the pod
    ``template``, with ``labels`` on the Job when given (e.g. Kueue's queue-name label)."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = dict(labels)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {"parallelism": pods, "completions": pods, "template": template},
    }
