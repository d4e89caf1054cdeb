"""What the benchmarks through the real kube-apiserver share: the simulated cluster with the
bundled platform applied, our webhook registered as the chart registers it, a plain aiohttp client
of the API server, and the Job creates that are measured (the webhook servers themselves are in
``webhook_servers.py``).

Imported by ``bench_apiserver.py``, ``bench_fail_safe.py`` and ``bench_faults.py`` as a plain module (a script's own
directory is on ``sys.path`` when it runs as ``python benchmarks/bench_x.py``). Only 127.0.0.1 is
used; every wait is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import ssl
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from e2e import devcluster  # noqa: E402  (the repository root is put on sys.path just above)
from e2e.manifests import TopologyShape  # noqa: E402
from webhook.core.platform.policy import PolicySet  # noqa: E402
from webhook.kube.files import load_policies  # noqa: E402

PLATFORM = REPO / "kueue-config" / "platform.yaml"
LOOPBACK = "127.0.0.1"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
#: Every Job a benchmark creates carries this label (value: the run's id), to list and delete them.
BENCH_LABEL = "kueue-governor.io/bench"
WEBHOOK_CONFIGURATION = "kgov-governor"  # the chart's default name: sorts before Kueue's
FIELD_MANAGER = "kgov-bench"
JOBS = "/apis/batch/v1/namespaces/{namespace}/jobs"
MUTATING = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
VALIDATING_POLICIES = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
VALIDATING_BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
CLUSTER_QUEUES = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues"
WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/workloads"
START_TIMEOUT_S = 60.0


class BenchError(RuntimeError):
    """A step of the benchmark did not happen within its bound (the message says which)."""


# --------------------------------------------------------------------------- the API server client


class ApiError(Exception):
    """The API server answered with an error ``Status`` (``code``, ``reason``, ``message``)."""

    def __init__(self, code: int, status: dict[str, Any]) -> None:
        self.code = code
        self.status = status
        super().__init__(f"HTTP {code}: {status.get('message', status)}")


@dataclass
class Api:
    """An aiohttp session on the API server with the admin's static token."""

    url: str
    session: aiohttp.ClientSession

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
    ) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if data is not None else {}
        async with self.session.request(
            method,
            f"{self.url}{path}",
            data=data,
            params=params,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as response:
            text = await response.read()
            try:
                answer = json.loads(text) if text else {}
            except ValueError:  # e.g. a plain-text answer of a server shutting down
                answer = {"message": text.decode(errors="replace")}
            if not isinstance(answer, dict):
                answer = {"message": str(answer)}
            if response.status >= 400:
                raise ApiError(response.status, answer)
            return answer

    async def apply(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply of ``body`` at ``path`` (the object's own URL)."""
        return await self.request(
            "PATCH",
            path,
            body,
            {"fieldManager": FIELD_MANAGER, "force": "true"},
            "application/apply-patch+yaml",
        )

    async def delete(self, path: str, params: dict[str, str] | None = None) -> None:
        with contextlib.suppress(ApiError):
            await self.request("DELETE", path, params=params)

    async def items(self, path: str, params: dict[str, str] | None = None) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = (await self.request("GET", path, params=params)).get("items") or []
        return found


@contextlib.asynccontextmanager
async def api_session(info: devcluster.ClusterInfo, token: str, connections: int = 64) -> Any:
    context = ssl.create_default_context(cafile=info.ca_file)
    connector = aiohttp.TCPConnector(ssl=context, limit=connections)
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        yield Api(info.apiserver_url, session)


async def webhook_call_totals(api: Api, webhook: str) -> tuple[float, int]:
    """The API server's own account of its calls to ``webhook`` (a webhook's ``name``): seconds
    spent in them and how many, from ``apiserver_admission_webhook_admission_duration_seconds``
    (summed over operations and results) on its ``/metrics``."""
    from prometheus_client.parser import text_string_to_metric_families

    async with api.session.get(f"{api.url}/metrics", timeout=aiohttp.ClientTimeout(total=30)) as response:
        text = await response.text()
    seconds, calls = 0.0, 0
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_admission_webhook_admission_duration_seconds":
            continue
        for sample in family.samples:
            if sample.labels.get("name") != webhook:
                continue
            if sample.name.endswith("_sum"):
                seconds += sample.value
            elif sample.name.endswith("_count"):
                calls += int(sample.value)
    return seconds, calls


#: The API server's histograms that split a create into its parts, with the labels that name a part.
#: Only CREATE admissions and POSTs of Jobs are counted (``operation`` / ``verb`` and ``resource``).
BREAKDOWN_FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "apiserver_request_duration_seconds": ("request", ("verb", "resource", "dry_run")),
    "apiserver_admission_step_admission_duration_seconds": ("step", ("type",)),
    "apiserver_admission_controller_admission_duration_seconds": ("plugin", ("name", "type")),
    "apiserver_admission_webhook_admission_duration_seconds": ("webhook", ("name", "type")),
}


async def admission_breakdown(api: Api) -> dict[tuple[str, ...], tuple[float, int]]:
    """The API server's own account of where a create's time goes, from its ``/metrics``: for each
    part (the whole POST of a Job; each admission step, ``admit`` is mutation and ``validate``
    validation; each admission plugin; each webhook by name), the seconds spent in it and how many
    times it ran, summed since the API server started. Keys: ``(kind, *label values)`` with the kind
    and labels of :data:`BREAKDOWN_FAMILIES`."""
    from prometheus_client.parser import text_string_to_metric_families

    async with api.session.get(f"{api.url}/metrics", timeout=aiohttp.ClientTimeout(total=30)) as response:
        text = await response.text()
    totals: dict[tuple[str, ...], tuple[float, int]] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in BREAKDOWN_FAMILIES:
            continue
        kind, labels = BREAKDOWN_FAMILIES[family.name]
        for sample in family.samples:
            found = sample.labels
            if found.get("operation", "CREATE") != "CREATE":
                continue
            if kind == "request" and (found.get("resource") != "jobs" or found.get("verb") not in ("POST", "CREATE")):
                continue
            key = (kind, *(found.get(label, "") for label in labels))
            seconds, count = totals.get(key, (0.0, 0))
            if sample.name.endswith("_sum"):
                totals[key] = (seconds + sample.value, count)
            elif sample.name.endswith("_count"):
                totals[key] = (seconds, count + int(sample.value))
    return totals


def admin_token(root: Path) -> str:
    tokens = devcluster.Paths(root).tokens.read_text().splitlines()
    return next(line.split(",")[0] for line in tokens if ",kgov-admin," in line)


# --------------------------------------------------------------------------- Jobs


def job(name: str, namespace: str, run: str, queue: str | None = None) -> dict[str, Any]:
    """A one-pod Job (1 CPU, 1 GPU), created suspended; with ``queue`` it carries that queue label."""
    labels = {BENCH_LABEL: run}
    if queue is not None:
        labels[QUEUE_LABEL] = queue
    container = {
        "name": "main",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "suspend": True,
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 0,
            "template": {
                "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [container]}
            },
        },
    }


async def delete_jobs(api: Api, namespaces: list[str], run: str, timeout: float = 120.0) -> None:
    """Delete the run's Jobs (their Workloads go with them) and wait until none is left."""
    selector = {"labelSelector": f"{BENCH_LABEL}={run}"}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for namespace in namespaces:
            # A collection of hundreds can take the API server longer than one request's timeout
            # on a loaded machine: whatever it has not deleted yet, the next round asks again.
            with contextlib.suppress(TimeoutError, aiohttp.ClientError, ApiError):
                await api.request(
                    "DELETE",
                    JOBS.format(namespace=namespace),
                    params={**selector, "propagationPolicy": "Background"},
                    timeout=120,
                )
        left = 0
        for namespace in namespaces:
            left += len(await api.items(JOBS.format(namespace=namespace), selector))
            left += len(await api.items(WORKLOADS.format(namespace=namespace)))
        if left == 0:
            return
        await asyncio.sleep(1)
    raise BenchError(f"Jobs or Workloads of run {run} still there after {timeout:.0f}s")


async def create_jobs(
    api: Api,
    namespace: str,
    bodies: list[dict[str, Any]],
    clients: int,
    params: dict[str, str] | None = None,
) -> tuple[list[float], float]:
    """Create ``bodies`` in ``namespace`` by ``clients`` clients at once (1: one after the other),
    each client taking the next body when its create is answered; with ``params`` (e.g.
    ``{"dryRun": "All"}``) on every POST. Returns each create's latency in ms (request sent to
    answer read) and the wall seconds of the whole batch. Raises ApiError on a refused create."""
    latencies: list[float] = []
    path = JOBS.format(namespace=namespace)
    waiting = list(reversed(bodies))

    async def client() -> None:
        while waiting:
            body = waiting.pop()
            started = time.perf_counter()
            await api.request("POST", path, body, params)
            latencies.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(max(1, clients))))
    return latencies, time.perf_counter() - started


async def hold_cluster_queues(api: Api) -> list[str]:
    """``stopPolicy: Hold`` on every ClusterQueue: Kueue still makes a Workload per Job but admits
    none, so no pod runs and the cluster stays steady during a run."""
    names = [queue["metadata"]["name"] for queue in await api.items(CLUSTER_QUEUES)]
    for name in names:
        await api.request(
            "PATCH", f"{CLUSTER_QUEUES}/{name}", {"spec": {"stopPolicy": "Hold"}}, None, "application/merge-patch+json"
        )
    return names


# --------------------------------------------------------------------------- registration


def webhook_configuration(chart: list[dict[str, Any]], port: int, failure_policy: str) -> dict[str, Any]:
    """The chart's MutatingWebhookConfiguration calling ``https://127.0.0.1:port/mutate``."""
    (configuration,) = (obj for obj in chart if obj["kind"] == "MutatingWebhookConfiguration")
    body = json.loads(json.dumps(configuration))
    for hook in body["webhooks"]:
        hook["clientConfig"]["url"] = f"https://{LOOPBACK}:{port}/mutate"
        hook["failurePolicy"] = failure_policy
    return dict(body)


async def register(api: Api, configuration: dict[str, Any] | None) -> None:
    """Apply the MutatingWebhookConfiguration, or delete it (None)."""
    if configuration is None:
        await api.delete(f"{MUTATING}/{WEBHOOK_CONFIGURATION}")
    else:
        await api.apply(f"{MUTATING}/{configuration['metadata']['name']}", configuration)


async def apply_admission_policies(api: Api, chart: list[dict[str, Any]]) -> int:
    """Apply the chart's ValidatingAdmissionPolicies and their bindings; returns how many objects."""
    path = {"ValidatingAdmissionPolicy": VALIDATING_POLICIES, "ValidatingAdmissionPolicyBinding": VALIDATING_BINDINGS}
    count = 0
    for obj in chart:
        if obj["kind"] in path:
            await api.apply(f"{path[obj['kind']]}/{obj['metadata']['name']}", obj)
            count += 1
    return count


# --------------------------------------------------------------------------- the cluster


@dataclass
class Bench:
    """The running cluster with the bundled platform, and where its files are."""

    root: Path
    info: devcluster.ClusterInfo
    platform: Path  # the copy ``kgov serve`` reads (a policy change rewrites it)
    token: str
    context: ssl.SSLContext  # trusts the cluster's CA (the webhooks' certificates too)

    def policies(self) -> PolicySet:
        return load_policies(self.platform)


@contextlib.contextmanager
def bench_cluster(root: Path, shape: str) -> Iterator[Bench]:
    """``up`` the e2e cluster in ``root``, apply the bundled platform (team namespaces included);
    ``down`` on exit."""
    platform = root / "platform.yaml"
    with devcluster.running_cluster(root, shape=TopologyShape.parse(shape)) as info:
        shutil.copyfile(PLATFORM, platform)
        devcluster.apply_platform(root, platform)
        context = ssl.create_default_context(cafile=info.ca_file)
        yield Bench(root, info, platform, admin_token(root), context)


def apiserver_pid(root: Path) -> int:
    """The pid of the cluster's kube-apiserver (its pid file, checked to be still that process);
    raises BenchError when it is not running."""
    pid = devcluster.process_alive(devcluster.Paths(root), "kube-apiserver")
    if pid is None:
        raise BenchError(f"kube-apiserver of {root} is not running")
    return pid


def team_namespaces(policies: PolicySet) -> dict[str, str]:
    """namespace → team, for the teams that list their namespaces."""
    return {namespace: team.team for team in policies.teams for namespace in team.namespaces or []}


def expected_labels(policies: PolicySet, namespace: str) -> dict[str, str]:
    """The queue and Kueue priority labels ``kgov serve`` gives a Job without either in ``namespace``."""
    (team,) = (team for team in policies.teams if namespace in (team.namespaces or []))
    labels = {QUEUE_LABEL: str(team.queue.default)}
    if team.kueuePriority is not None and team.kueuePriority.default is not None:
        labels[PRIORITY_LABEL] = str(team.kueuePriority.default)
    return labels


def load_average() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def add_create_options(parser: argparse.ArgumentParser, namespace: str, sequential: int) -> None:
    """The options every create benchmark takes: the cluster's shape, the team namespace and the counts."""
    parser.add_argument("--shape", default="1x1x2x2", help="fake nodes SxBxRxH (default 4 nodes)")
    parser.add_argument("--namespace", default=namespace, help="team namespace of the Jobs")
    parser.add_argument(
        "--sequential", type=int, default=sequential, help="sequential creates per configuration per round"
    )
    parser.add_argument("--concurrent", type=int, default=96, help="concurrent creates per configuration per round")
    parser.add_argument("--clients", type=int, default=32, help="concurrent clients")
    parser.add_argument("--rounds", type=int, default=4, help="measured rounds (after one warm-up round)")


#: The bounds of the create benchmarks' counts (``--sequential`` … ``--rounds``), shared by their parsers.
COUNT_LIMITS = {"sequential": 2000, "concurrent": 5000, "clients": 128, "rounds": 9}


def check_counts(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse (``parser.error``, exit 2) a count option outside 1..its limit in :data:`COUNT_LIMITS`."""
    for name, limit in COUNT_LIMITS.items():
        value = getattr(args, name)
        if not 1 <= value <= limit:
            parser.error(f"--{name} must be between 1 and {limit}")
