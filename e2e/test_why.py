"""``kgov why`` and ``kgov status`` against the real Kueue: one pending Job per cause.

Each test makes its own ClusterQueue and LocalQueue (unique names, a fresh namespace, the bundled
ResourceFlavor ``p5-48xlarge`` and its Topology), so quota is its own whatever other tests left
running; topology capacity is shared, so expectations are read from Kueue's own message
(``QuotaReserved`` ``topology "aws-network" allows to fit only N out of M pod(s). Total nodes: T;
excluded: …``) and from the nodes, not assumed. Causes:

- over quota: the queue uses its nominal CPU and its cohort has nothing left to lend;
- no domain free: a 1-GPU pod bound to one host of every rack, so no rack has the free hosts a
  rack-required Job needs;
- a taint: every flavor node but one tainted ``NoSchedule`` (removed after the test);
- behind a higher priority: a StrictFIFO queue whose head (training, 500) waits for quota while
  a smaller experimentation (100) Job that would fit waits behind it;
- never fits: one pod more than the largest rack has hosts.

``kgov status -o json`` is compared with the ClusterQueues' own status fields.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.dynamic import DynamicClient

from e2e import support
from e2e.conftest import E2ECluster

pytestmark = pytest.mark.e2e

FLAVOR = "p5-48xlarge"
GPU = "nvidia.com/gpu"
RACK = "topology.k8s.aws/network-node-layer-3"
DELAY = ("pod-complete.stage.kwok.x-k8s.io/delay", "pod-complete.stage.kwok.x-k8s.io/jitter-delay")


def kgov(cluster: E2ECluster, *args: str, kubeconfig: Path | None = None) -> Any:
    """Run ``kgov ARGS --kubeconfig K -o json`` (K: the cluster's, or ``kubeconfig``) and return its JSON."""
    done = subprocess.run(
        [*support.kgov_command(), *args, "--kubeconfig", str(kubeconfig or cluster.kubeconfig), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def cluster_queue(name: str, namespace: str, cpu: str, cohort: str | None = None, **extra: Any) -> dict[str, Any]:
    cpu_quota: dict[str, Any] = {"name": "cpu", "nominalQuota": cpu}
    if "borrowingLimit" in extra:
        cpu_quota["borrowingLimit"] = extra.pop("borrowingLimit")
    spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory", GPU],
                "flavors": [
                    {
                        "name": FLAVOR,
                        "resources": [
                            cpu_quota,
                            {"name": "memory", "nominalQuota": "16Ti"},
                            {"name": GPU, "nominalQuota": 512},
                        ],
                    }
                ],
            }
        ],
        **extra,
    }
    if cohort:
        spec["cohortName"] = cohort
    return {"apiVersion": support.KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def job(
    name: str,
    namespace: str,
    queue: str,
    pods: int,
    cpu: str = "1",
    gpus: int = 0,
    rack: bool = False,
    priority: str = "",
) -> dict[str, Any]:
    """A Job that runs an hour once admitted (KWOK's delay, and its jitter bound, both 1h)."""
    requests = {"cpu": cpu, **({GPU: str(gpus)} if gpus else {})}
    annotations = dict.fromkeys(DELAY, "1h")
    if rack:
        annotations["kueue.x-k8s.io/podset-required-topology"] = RACK
    labels = {"kueue.x-k8s.io/queue-name": queue, **({"kueue.x-k8s.io/priority-class": priority} if priority else {})}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "suspend": True,
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {
                                "requests": requests,
                                "limits": {k: v for k, v in requests.items() if k != "cpu"},
                            },
                        }
                    ],
                },
            },
        },
    }


class Queues:
    """ClusterQueues (with a LocalQueue of the same name in the test's namespace) made by one test."""

    def __init__(self, dynamic: DynamicClient, namespace: str) -> None:
        self.dynamic, self.namespace = dynamic, namespace
        self.suffix = secrets.token_hex(3)
        self.made: list[dict[str, Any]] = []

    async def add(self, base: str, cpu: str, cohort: str | None = None, **extra: Any) -> str:
        name = f"why-{base}-{self.suffix}"
        queue = await support.create(
            self.dynamic,
            cluster_queue(name, self.namespace, cpu, f"{cohort}-{self.suffix}" if cohort else None, **extra),
        )
        self.made.append(queue)
        local = {
            "apiVersion": support.KUEUE_API,
            "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"clusterQueue": name},
        }
        await support.create(self.dynamic, local)
        await support.wait_cluster_queues_active(self.dynamic, [name])
        return name


@pytest.fixture
async def queues(dynamic: DynamicClient, namespace: str, bundled_config: support.Generated) -> AsyncIterator[Queues]:
    made = Queues(dynamic, namespace)
    yield made
    for queue in made.made:  # after `cleanup` (set up later, torn down first) removed the Workloads
        await support.delete(dynamic, queue)


async def submit(dynamic: DynamicClient, cleanup: support.Cleanup, body: dict[str, Any]) -> dict[str, Any]:
    return await support.create(dynamic, cleanup.add(body))


async def workload_of(
    dynamic: DynamicClient, obj: dict[str, Any], what: str, test: Any, timeout: float = 60.0
) -> dict[str, Any]:
    """Wait until the Workload of ``obj`` satisfies ``test(workload)``; return it."""
    namespace, uid = obj["metadata"]["namespace"], obj["metadata"]["uid"]

    async def probe() -> dict[str, Any] | None:
        found = await support.workload_for(dynamic, namespace, uid)
        return found if found is not None and test(found) else None

    return await support.wait_for(probe, f"the Workload of {obj['metadata']['name']} {what}", timeout)


async def reservation_shown(dynamic: DynamicClient, cluster_queue: str, cpu: str) -> None:
    """Wait until ``cluster_queue``'s status shows ``cpu`` CPUs reserved: Kueue updates a
    ClusterQueue's ``status.flavorsReservation`` after the Workloads' admission, and ``kgov why``
    reads the quota from there."""

    async def shown() -> bool:
        queue = await support.get(dynamic, support.KUEUE_API, "ClusterQueue", cluster_queue)
        flavors = ((queue or {}).get("status") or {}).get("flavorsReservation") or []
        totals = [r.get("total") for f in flavors for r in f.get("resources") or [] if r.get("name") == "cpu"]
        return any(str(total) == cpu for total in totals)

    await support.wait_for(shown, f"ClusterQueue {cluster_queue} to show {cpu} CPUs reserved", timeout=30)


def admitted(workload: dict[str, Any]) -> bool:
    return support.is_true(workload, "Admitted")


def pending_with(text: str) -> Any:
    def test(workload: dict[str, Any]) -> bool:
        reserved = support.condition(workload, "QuotaReserved") or {}
        return reserved.get("status") == "False" and text in str(reserved.get("message", ""))

    return test


async def flavor_nodes(dynamic: DynamicClient) -> list[dict[str, Any]]:
    nodes = await support.list_objects(dynamic, "v1", "Node")
    return [
        n
        for n in nodes
        if n["metadata"].get("labels", {}).get("node.kubernetes.io/instance-type") == "p5.48xlarge"
        and support.is_ready_schedulable(n)
    ]


def racks(nodes: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for node in nodes:
        out.setdefault(node["metadata"]["labels"][RACK], []).append(node)
    return out


def gpus_of(node: dict[str, Any]) -> int:
    return int(node["status"]["allocatable"][GPU])


FIT = r'topology "[^"]+" (?:allows to fit only (\d+) out of|doesn\'t allow to fit any of) (\d+) pod'


def kueue_fit(workload: dict[str, Any]) -> tuple[int, int, dict[str, int]]:
    """(pods that fit, pods asked for, excluded nodes per cause) from Kueue's QuotaReserved message."""
    message = str((support.condition(workload, "QuotaReserved") or {}).get("message", ""))
    found = re.search(FIT, message)
    assert found is not None, message
    excluded = {
        key: int(count)
        for key, count in re.findall(r'((?:taint|resource) "[^"]+"|nodeSelector|affinity): (\d+)', message)
    }
    return int(found.group(1) or 0), int(found.group(2)), excluded


async def why_agreeing(
    cluster: E2ECluster, dynamic: DynamicClient, obj: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``kgov why`` of a topology-pending Job and its Workload, read until both describe the same
    moment (Kueue re-evaluates as other tests' Workloads go): at most 5 tries."""
    for _ in range(5):
        before = await support.workload_for(dynamic, obj["metadata"]["namespace"], obj["metadata"]["uid"])
        answer = kgov(cluster, "why", f"job/{obj['metadata']['name']}", "-n", obj["metadata"]["namespace"])
        after = await support.workload_for(dynamic, obj["metadata"]["namespace"], obj["metadata"]["uid"])
        assert before is not None and after is not None
        if support.condition(before, "QuotaReserved") == support.condition(after, "QuotaReserved"):
            placement = answer["topology"][0]
            fit, _, excluded = kueue_fit(after)
            level = placement["levels"].index(RACK)
            if (
                placement["largestNow"][level]["pods"] == fit
                and {k: v for k, v in placement["excluded"].items() if k in excluded} == excluded
            ):
                return answer, after
    return answer, after


async def test_over_quota_names_the_queue_and_cohort_numbers(
    e2e_cluster: E2ECluster, dynamic: DynamicClient, namespace: str, queues: Queues, cleanup: support.Cleanup
) -> None:
    lender = await queues.add("lender", "2", cohort="why-cohort")
    borrower = await queues.add("borrower", "2", cohort="why-cohort", borrowingLimit="2")
    # The lender's own Job takes its nominal 2 CPUs first, so the cohort has nothing to lend.
    lent = await submit(dynamic, cleanup, job("lender-own", namespace, lender, 1, cpu="2"))
    await workload_of(dynamic, lent, "admitted", admitted)
    first = await submit(dynamic, cleanup, job("first", namespace, borrower, 1, cpu="2"))
    await workload_of(dynamic, first, "admitted", admitted)
    second = await submit(dynamic, cleanup, job("second", namespace, borrower, 1, cpu="2"))
    pending = await workload_of(dynamic, second, "waiting for quota", pending_with("insufficient unused quota for cpu"))
    assert "2 more needed" in support.condition(pending, "QuotaReserved")["message"]  # type: ignore[index]

    await reservation_shown(dynamic, borrower, "2")
    answer = kgov(e2e_cluster, "why", "job/second", "-n", namespace)
    assert answer["cause"] == "over quota", answer["summary"]
    assert answer["state"]["state"] == "waiting for quota"
    assert answer["queue"]["clusterQueue"] == borrower
    cpu = next(q for q in answer["quota"] if q["resource"] == "cpu")
    assert (cpu["needed"], cpu["reserved"], cpu["nominal"], cpu["borrowingLimit"]) == (2, 2, 2, 2)
    assert (cpu["cohortAvailable"], cpu["available"]) == (0, 0)
    # Kueue's "2 more needed" is what we say is short.
    assert cpu["needed"] - cpu["available"] == 2
    assert any("borrowing the cohort does not have" in h for h in answer["helps"])

    status = kgov(e2e_cluster, "status")
    mine = {row["clusterQueue"]: row for row in status}
    for name in (lender, borrower):
        stored = await support.get(dynamic, support.KUEUE_API, "ClusterQueue", name)
        assert stored is not None
        row = mine[name]
        assert row["admittedWorkloads"] == stored["status"]["admittedWorkloads"] == 1
        assert row["pendingWorkloads"] == stored["status"]["pendingWorkloads"] == (1 if name == borrower else 0)
        reservation = {r["name"]: r for f in stored["status"]["flavorsReservation"] for r in f["resources"]}
        usage = {r["name"]: r for f in stored["status"]["flavorsUsage"] for r in f["resources"]}
        ours = {r["resource"]: r for r in row["resources"]}
        assert ours["cpu"]["reserved"] == int(reservation["cpu"]["total"]) == 2
        assert ours["cpu"]["borrowed"] == int(reservation["cpu"]["borrowed"]) == 0
        assert ours["cpu"]["used"] == int(usage["cpu"]["total"]) == 2
        assert ours["cpu"]["lendable"] == 0
    assert mine[borrower]["oldestPending"]["name"] == pending["metadata"]["name"]
    assert mine[borrower]["oldestPending"]["cause"] == "over quota"


async def pending_rack_job(
    dynamic: DynamicClient,
    cleanup: support.Cleanup,
    body: dict[str, Any],
    tries: int = 3,
    text: str = "allows to fit only",
) -> dict[str, Any]:
    """Submit ``body`` until Kueue holds it pending on topology, its message holding ``text``
    (at most ``tries`` times).

    Kueue counts pods that are not its own (the fillers) through a reconciler of its own; until
    that has seen them, a Job submitted right after them can be admitted onto their hosts. Such
    a Job is deleted (with its Workload) and submitted again.
    """
    cleanup.add(body)
    name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
    for attempt in range(1, tries + 1):
        created = await support.create(dynamic, body)

        def settled(workload: dict[str, Any]) -> bool:
            return admitted(workload) or pending_with(text)(workload)

        workload = await workload_of(dynamic, created, "pending on topology or admitted", settled, timeout=90)
        if not admitted(workload):
            return created
        if attempt < tries:
            await support.delete_workload_object(dynamic, body)

            async def gone() -> bool:
                return await support.get(dynamic, body["apiVersion"], body["kind"], name, namespace) is None

            await support.wait_for(gone, f"Job {name} to go", 60)
    raise AssertionError(f"Kueue admitted Job {name} {tries} times: the filler pods were not counted")


async def test_no_domain_free_counts_nodes_as_kueue_does(
    e2e_cluster: E2ECluster, dynamic: DynamicClient, namespace: str, queues: Queues, cleanup: support.Cleanup
) -> None:
    queue = await queues.add("topology", "1000")
    by_rack = racks(await flavor_nodes(dynamic))
    hosts = max(len(members) for members in by_rack.values())
    # A 1-GPU pod (no Kueue label: not Kueue's; bound by name) on one host of every rack.
    for index, members in enumerate(by_rack.values()):
        filler = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"filler-{index}", "namespace": namespace},
            "spec": {
                "nodeName": members[0]["metadata"]["name"],
                "containers": [
                    {
                        "name": "c",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {GPU: "1"}, "limits": {GPU: "1"}},
                    }
                ],
            },
        }
        await support.create(dynamic, filler)
    gpus = gpus_of(next(iter(by_rack.values()))[0])
    blocked = await pending_rack_job(dynamic, cleanup, job("rack", namespace, queue, hosts, gpus=gpus, rack=True))

    answer, workload = await why_agreeing(e2e_cluster, dynamic, blocked)
    fit, asked, excluded = kueue_fit(workload)
    assert answer["cause"] == "no domain free", answer["summary"]
    placement = answer["topology"][0]
    assert (placement["mode"], placement["level"], placement["count"]) == ("required", RACK, asked)
    assert placement["largestNow"][2]["pods"] == fit < asked
    assert placement["largestEmpty"][2]["pods"] >= asked
    # Every host with a filler has less than one pod's GPUs free: Kueue and we count them alike.
    assert excluded[f'resource "{GPU}"'] >= len(by_rack)
    assert {k: v for k, v in placement["excluded"].items() if k in excluded} == excluded
    assert placement["kueueNodes"] == len(await flavor_nodes(dynamic))


async def test_taint_excluding_nodes_is_named_with_its_count(
    e2e_cluster: E2ECluster, dynamic: DynamicClient, api: Any, namespace: str, queues: Queues, cleanup: support.Cleanup
) -> None:
    queue = await queues.add("taint", "1000")
    nodes = await flavor_nodes(dynamic)
    by_rack = racks(nodes)
    hosts = max(len(members) for members in by_rack.values())
    key = f"why-e2e-{queues.suffix}"
    tainted = [n["metadata"]["name"] for n in nodes][1:]

    async def set_taint(name: str, on: bool) -> None:
        await taint_node(api, name, key, on)

    try:
        for name in tainted:
            await set_taint(name, True)
        blocked = await submit(
            dynamic, cleanup, job("tainted", namespace, queue, hosts, gpus=gpus_of(nodes[0]), rack=True)
        )
        await workload_of(
            dynamic, blocked, "pending on topology", pending_with(f'taint "{key}=x:NoSchedule"'), timeout=90
        )
        answer, workload = await why_agreeing(e2e_cluster, dynamic, blocked)
    finally:
        for name in tainted:
            await set_taint(name, False)
    _, _, excluded = kueue_fit(workload)
    assert excluded[f'taint "{key}=x:NoSchedule"'] == len(tainted)
    assert answer["cause"] == "taint", answer["summary"]
    assert answer["topology"][0]["excluded"][f'taint "{key}=x:NoSchedule"'] == len(tainted)
    assert f'taint "{key}=x:NoSchedule" on {len(tainted)} nodes' in answer["summary"]
    assert any(h.startswith(f'tolerate taint "{key}=x:NoSchedule"') for h in answer["helps"])


async def taint_node(api: Any, name: str, key: str, on: bool) -> None:
    """Add (``on``) or remove the taint ``KEY=x:NoSchedule`` of one node."""
    from kubernetes_asyncio import client as k8s

    core = k8s.CoreV1Api(api)
    node = await core.read_node(name)
    taints = [t for t in node.spec.taints or [] if t.key != key]
    if on:
        taints.append(k8s.V1Taint(key=key, value="x", effect="NoSchedule"))
    await core.patch_node(name, {"spec": {"taints": [api.sanitize_for_serialization(t) for t in taints]}})


def gpu_filler(name: str, namespace: str, node: str) -> dict[str, Any]:
    """A pod of 1 GPU bound to ``node`` by name (no Kueue label: not Kueue's)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {GPU: "1"}, "limits": {GPU: "1"}},
                }
            ],
        },
    }


async def test_one_pod_advice_counts_the_nodes_a_taint_excludes(
    e2e_cluster: E2ECluster, dynamic: DynamicClient, api: Any, namespace: str, queues: Queues, cleanup: support.Cleanup
) -> None:
    queue = await queues.add("taint1", "1000")
    nodes = await flavor_nodes(dynamic)
    key = f"why-one-{queues.suffix}"
    free, tainted = nodes[0]["metadata"]["name"], [n["metadata"]["name"] for n in nodes[1:]]
    taint = f'taint "{key}=x:NoSchedule"'
    try:
        for name in tainted:
            await taint_node(api, name, key, True)
        # The one untainted node has a GPU taken: the pod fits there only once it is free.
        await support.create(dynamic, gpu_filler("filler", namespace, free))
        body = job("one", namespace, queue, 1, gpus=gpus_of(nodes[0]), rack=True)
        blocked = await pending_rack_job(dynamic, cleanup, body, text=taint)
        answer, workload = await why_agreeing(e2e_cluster, dynamic, blocked)
    finally:
        for name in tainted:
            await taint_node(api, name, key, False)
    _, asked, excluded = kueue_fit(workload)
    assert asked == 1 and excluded == {taint: len(tainted), f'resource "{GPU}"': 1}
    assert answer["cause"] == "no domain free", answer["summary"]
    assert {k: v for k, v in answer["topology"][0]["excluded"].items() if k in excluded} == excluded
    helps = answer["helps"]
    tolerate = [h for h in helps if h.startswith(f"tolerate {taint} (or remove it): ")]
    held = re.search(r"would hold (\d+) pods? now$", tolerate[0]) if len(tolerate) == 1 else None
    assert held is not None and int(held.group(1)) >= 1, helps
    assert f"wait for running workloads on the 1 eligible node ({len(tainted)} excluded: {taint}: {len(tainted)})" in (
        " ".join(helps)
    )
    # Kueue is the oracle of "would fit now": with the taint removed (above), it admits the Job.
    await workload_of(dynamic, blocked, "admitted once the taint is gone", admitted, timeout=90)


async def test_pod_requesting_nothing_the_queue_covers_never_fits(
    e2e_cluster: E2ECluster, dynamic: DynamicClient, namespace: str, queues: Queues, cleanup: support.Cleanup
) -> None:
    queue = await queues.add("noflavor", "1000")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "pod1", "namespace": namespace, "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
    }
    created = await submit(dynamic, cleanup, pod)
    # Kueue's own verdict (tas_flavorassigner.go onlyTASFlavor): no TAS flavor for a podset
    # requesting none of the covered resources.
    await workload_of(
        dynamic, created, "pending with no TAS flavor", pending_with("no TAS flavor assigned"), timeout=90
    )

    answer = kgov(e2e_cluster, "why", "pod/pod1", "-n", namespace)
    assert answer["cause"] == "never fits", answer["summary"]
    assert answer["summary"].startswith(
        f"no flavor: podset main requests none of the resources ClusterQueue {queue} covers (cpu, memory, {GPU})"
    )
    assert any("request one of them for its pods, e.g. cpu" in h for h in answer["helps"])


async def test_over_quota_names_the_borrowing_limit_that_binds(
    e2e_cluster: E2ECluster, dynamic: DynamicClient, namespace: str, queues: Queues, cleanup: support.Cleanup
) -> None:
    await queues.add("bl-lender", "4", cohort="why-bl")
    borrower = await queues.add("bl-borrower", "2", cohort="why-bl", borrowingLimit="1")
    big = await submit(dynamic, cleanup, job("big", namespace, borrower, 1, cpu="3"))  # borrows 1: its limit
    await workload_of(dynamic, big, "admitted", admitted)
    more = await submit(dynamic, cleanup, job("more", namespace, borrower, 1, cpu="1"))
    pending = await workload_of(dynamic, more, "waiting for quota", pending_with("insufficient unused quota for cpu"))
    assert "1 more needed" in support.condition(pending, "QuotaReserved")["message"]  # type: ignore[index]

    await reservation_shown(dynamic, borrower, "3")
    answer = kgov(e2e_cluster, "why", "job/more", "-n", namespace)
    assert answer["cause"] == "over quota", answer["summary"]
    cpu = next(q for q in answer["quota"] if q["resource"] == "cpu")
    # The cohort has 6 - 3 = 3 CPUs unused; the borrowing limit leaves none.
    assert (cpu["reserved"], cpu["nominal"], cpu["borrowingLimit"], cpu["cohortAvailable"]) == (3, 2, 1, 3)
    assert cpu["needed"] - cpu["available"] == 1  # Kueue's "1 more needed"
    assert (
        "its borrowingLimit binds, not the cohort: it may hold at most 3 (nominal 2 + borrowingLimit 1)"
        in (answer["summary"])
    )
    assert "while cohort" in answer["summary"] and "has 3 unused" in answer["summary"]
    assert f"raise ClusterQueue {borrower}'s borrowingLimit for cpu from 1 to 2" in answer["helps"]
    assert not any("the cohort does not have" in h for h in answer["helps"])


async def owned_by(dynamic: DynamicClient, namespace: str, kind: str, api_version: str, uids: set[str]) -> set[str]:
    """The uids of the ``kind`` objects of ``namespace`` that one of ``uids`` owns."""
    return {
        item["metadata"]["uid"]
        for item in await support.list_objects(dynamic, api_version, kind, namespace)
        if any(owner.get("uid") in uids for owner in item["metadata"].get("ownerReferences") or [])
    }


async def kueue_workloads(dynamic: DynamicClient, namespace: str, uids: set[str]) -> dict[str, dict[str, Any]]:
    """Kueue's Workloads owned by one of ``uids``, by name."""
    return {
        w["metadata"]["name"]: w
        for w in await support.list_objects(dynamic, support.KUEUE_API, "Workload", namespace)
        if any(owner.get("uid") in uids for owner in w["metadata"].get("ownerReferences") or [])
    }


async def test_workloads_of_what_an_object_owns_are_found(
    e2e_cluster: E2ECluster, dynamic: DynamicClient, namespace: str, queues: Queues, cleanup: support.Cleanup
) -> None:
    queue = await queues.add("owners", "100")
    labels = {"kueue.x-k8s.io/queue-name": queue}

    def template(cpu: str, app: str) -> dict[str, Any]:
        container = {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": cpu}}}
        return {"metadata": {"labels": {"app": app}}, "spec": {"containers": [container]}}

    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "labels": labels},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": template("40", "web")},
    }
    statefulset = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "labels": labels},
        "spec": {
            "replicas": 2,
            "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": template("1", "db"),
        },
    }
    job_template = job("x", namespace, queue, 1)
    cron_job = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly"},
        "spec": {
            "schedule": "* * * * *",
            "concurrencyPolicy": "Forbid",
            "jobTemplate": {"metadata": {"labels": labels}, "spec": job_template["spec"]},
        },
    }
    made = {}
    for body in (deployment, statefulset, cron_job):
        body["metadata"]["namespace"] = namespace
        made[body["kind"]] = await submit(dynamic, cleanup, body)

    async def chain(kind: str) -> dict[str, dict[str, Any]]:
        uids = {made[kind]["metadata"]["uid"]}
        if kind == "Deployment":
            uids = await owned_by(
                dynamic, namespace, "Pod", "v1", await owned_by(dynamic, namespace, "ReplicaSet", "apps/v1", uids)
            )
        elif kind == "CronJob":
            uids = await owned_by(dynamic, namespace, "Job", "batch/v1", uids)
        else:
            uids |= await owned_by(dynamic, namespace, "Pod", "v1", uids)
        return await kueue_workloads(dynamic, namespace, uids)

    async def settled() -> dict[str, dict[str, dict[str, Any]]] | None:
        found = {kind: await chain(kind) for kind in made}
        decided = all(support.condition(w, "QuotaReserved") for ws in found.values() for w in ws.values())
        counts = (len(found["Deployment"]), len(found["StatefulSet"]), len(found["CronJob"]))
        return found if counts == (3, 1, 1) and decided else None

    # A CronJob makes its first Job within a minute.
    found = await support.wait_for(
        settled, "Kueue's Workloads of the Deployment's pods, the StatefulSet, the CronJob's Job", 150
    )
    for kind, resource in (
        ("Deployment", "deployment/web"),
        ("StatefulSet", "statefulset/db"),
        ("CronJob", "cronjob/nightly"),
    ):
        answer = kgov(e2e_cluster, "why", resource, "-n", namespace)
        assert answer["cause"] != "no workload", (kind, answer["summary"])
        kueue = found[kind]
        assert answer["workload"] in kueue, (kind, answer["workload"], sorted(kueue))
        if kind == "StatefulSet":  # Kueue names the StatefulSet itself as an owner of its pod group
            continue
        assert {line["name"] for line in answer["owned"]} == set(kueue), kind
    web = kgov(e2e_cluster, "why", "deployment/web", "-n", namespace)
    states = {line["name"]: line for line in web["owned"]}
    waiting = [name for name, w in found["Deployment"].items() if not support.is_true(w, "QuotaReserved")]
    assert len(waiting) == 1, "100 CPUs hold 2 of the 3 pods of 40"
    # The report is on the pending pod's Workload; each line names the pod owning it.
    assert web["workload"] == waiting[0] and web["cause"] == "over quota", web["summary"]
    assert states[waiting[0]]["cause"] == "over quota" and states[waiting[0]]["owner"].startswith("Pod/web-")
    assert sum(line["state"] in ("admitted", "running") for line in web["owned"]) == 2


async def test_behind_higher_priority_names_the_head(
    e2e_cluster: E2ECluster, dynamic: DynamicClient, namespace: str, queues: Queues, cleanup: support.Cleanup
) -> None:
    queue = await queues.add("priority", "4", queueingStrategy="StrictFIFO")
    running = await submit(
        dynamic, cleanup, job("running", namespace, queue, 1, cpu="2", priority="experimentation-priority")
    )
    await workload_of(dynamic, running, "admitted", admitted)
    head = await submit(dynamic, cleanup, job("head", namespace, queue, 1, cpu="4", priority="training-priority"))
    head_workload = await workload_of(dynamic, head, "waiting for quota", pending_with("insufficient unused quota"))
    behind = await submit(
        dynamic, cleanup, job("behind", namespace, queue, 1, cpu="2", priority="experimentation-priority")
    )
    behind_workload = await workload_of(dynamic, behind, "created", lambda w: True)

    await reservation_shown(dynamic, queue, "2")
    answer = kgov(e2e_cluster, "why", "job/behind", "-n", namespace)
    stored = await support.workload_for(dynamic, namespace, behind["metadata"]["uid"])
    assert stored is not None and not admitted(stored)  # Kueue holds it: 2 CPUs free, but StrictFIFO
    assert answer["cause"] == "behind higher priority", answer["summary"]
    position = answer["queue"]["position"]
    assert position["inClusterQueue"] == 1
    assert position["ahead"][0]["workload"] == f"{namespace}/{head_workload['metadata']['name']}"
    assert position["ahead"][0]["priority"] == head_workload["spec"]["priority"] == 500
    assert answer["queue"]["priority"] == behind_workload["spec"]["priority"] == 100
    cpu = next(q for q in answer["quota"] if q["resource"] == "cpu")
    assert cpu["available"] == 2 == cpu["needed"]

    head_answer = kgov(e2e_cluster, "why", "job/head", "-n", namespace)
    assert head_answer["cause"] == "over quota"
    assert next(q for q in head_answer["quota"] if q["resource"] == "cpu")["available"] == 2


async def test_never_fits_names_the_largest_rack(
    e2e_cluster: E2ECluster,
    dynamic: DynamicClient,
    namespace: str,
    queues: Queues,
    cleanup: support.Cleanup,
    tmp_path: Path,
) -> None:
    queue = await queues.add("never", "1000")
    nodes = await flavor_nodes(dynamic)
    hosts = max(len(members) for members in racks(nodes).values())
    big = await submit(dynamic, cleanup, job("too-big", namespace, queue, hosts + 1, gpus=gpus_of(nodes[0]), rack=True))
    workload = await workload_of(dynamic, big, "pending on topology", pending_with("pod(s)"), timeout=90)
    _, asked, _ = kueue_fit(workload)

    answer = kgov(e2e_cluster, "why", "job/too-big", "-n", namespace)
    assert answer["cause"] == "never fits", answer["summary"]
    # Without -n, the namespace of the kubeconfig's current context, as kubectl uses it.
    config = yaml.safe_load(e2e_cluster.kubeconfig.read_text())
    current = next(c for c in config["contexts"] if c["name"] == config["current-context"])
    current["context"]["namespace"] = namespace
    scoped = tmp_path / "kubeconfig"
    scoped.write_text(yaml.safe_dump(config))
    assert kgov(e2e_cluster, "why", "job/too-big", kubeconfig=scoped)["workload"] == answer["workload"]
    empty = answer["topology"][0]["largestEmpty"]
    assert asked == hosts + 1
    assert empty[2]["pods"] == hosts == empty[2]["nodes"]
    assert f"has {hosts} eligible nodes and holds {hosts} such pods" in answer["summary"]
    assert any(h.startswith("ask for layer-2") for h in answer["helps"])


async def test_a_workload_never_fits_when_its_podsets_together_do_not(
    e2e_cluster: E2ECluster, dynamic: DynamicClient, namespace: str, queues: Queues, cleanup: support.Cleanup
) -> None:
    # A PyTorchJob: Master 1 + Worker N, a whole node each, N the flavor's nodes: each podset
    # alone fits the empty nodes, both together do not, and Kueue admits all or none.
    queue = await queues.add("together", "1000")
    nodes = await flavor_nodes(dynamic)
    template = job("x", namespace, queue, 1, gpus=gpus_of(nodes[0]))["spec"]["template"]
    replica = {"restartPolicy": "Never", "template": template}
    body = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "together", "namespace": namespace, "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {
            "runPolicy": {"suspend": True},
            "pytorchReplicaSpecs": {
                "Master": {**replica, "replicas": 1},
                "Worker": {**replica, "replicas": len(nodes)},
            },
        },
    }
    created = await submit(dynamic, cleanup, body)
    await workload_of(dynamic, created, "pending on topology", pending_with("pod(s)"), timeout=90)
    answer = kgov(e2e_cluster, "why", "pytorchjob/together", "-n", namespace)
    assert answer["cause"] == "never fits", answer["summary"]
    assert [(p["podset"], p["count"]) for p in answer["topology"]] == [("master", 1), ("worker", len(nodes))]
    assert answer["summary"].startswith(
        f"the workload needs {len(nodes) + 1} pods in all (podsets master 1, worker {len(nodes)}) and Kueue admits "
        f"all or none: the {len(nodes)} eligible nodes hold {len(nodes)} such pods with nothing running"
    ), answer["summary"]
    stored = await support.workload_for(dynamic, namespace, created["metadata"]["uid"])
    assert stored is not None and not support.is_true(stored, "QuotaReserved")


async def test_governed_job_shows_the_policy_decision(
    e2e_cluster: E2ECluster, dynamic: DynamicClient, bundled_governor: Any, cleanup: support.Cleanup
) -> None:
    name = f"why-governed-{secrets.token_hex(3)}"
    body = job(name, "hyperpod-ns-research", "", 1, gpus=8)
    del body["metadata"]["labels"]
    created = await submit(dynamic, cleanup, body)
    assert created["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "hyperpod-ns-research-localqueue"
    workload = await workload_of(dynamic, created, "admitted", admitted, timeout=120)

    answer = kgov(e2e_cluster, "why", f"job/{name}", "-n", "hyperpod-ns-research")
    assert answer["state"]["state"] in ("admitted", "running")
    decision = answer["decision"]
    assert decision["team"] == "research"
    rules = {rule["rule"]: rule for rule in decision["rules"]}
    # The API server records no field manager for what a webhook added: each is the policy's.
    for rule in ("queue", "kueuePriority", "podPriority", "nodeAffinity", "topology"):
        assert rules[rule]["by"] == "policy", rules.get(rule)
    assert rules["podPriority"]["policy"] == "training-priority"
    assert rules["nodeAffinity"]["reason"] == "podset 'main': team node affinity"
    assert "auto" in rules["topology"]["reason"]

    # Asked about the Workload itself, the policy is told for the Job it was made for (read live).
    by_workload = kgov(e2e_cluster, "why", f"workload/{workload['metadata']['name']}", "-n", "hyperpod-ns-research")
    assert by_workload["decision"]["owner"] == f"Job hyperpod-ns-research/{name}"
    assert by_workload["decision"]["team"] == "research" and by_workload["policyNote"] is None
    assert by_workload["decision"]["rules"] == decision["rules"]


async def test_a_value_the_user_set_is_told_from_the_policys(
    e2e_cluster: E2ECluster, dynamic: DynamicClient, bundled_governor: Any, cleanup: support.Cleanup
) -> None:
    name = f"why-labelled-{secrets.token_hex(3)}"
    body = job(name, "hyperpod-ns-research", "", 1, gpus=8, priority="experimentation-priority")
    del body["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    created = await submit(dynamic, cleanup, body)
    assert created["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "experimentation-priority"

    answer = kgov(e2e_cluster, "why", f"job/{name}", "-n", "hyperpod-ns-research")
    rules = {rule["rule"]: rule for rule in answer["decision"]["rules"]}
    priority = rules["kueuePriority"]
    assert priority["by"] == "user" and priority["reason"] == "allowed by the policy", priority
    assert priority["stored"] == "experimentation-priority" and priority["setBy"]
    # The policy then gave the pods the Kueue priority the user asked for.
    assert rules["podPriority"]["by"] == "policy" and rules["podPriority"]["policy"] == "experimentation-priority"
    assert rules["podPriority"]["reason"] == "podset 'main': the Kueue priority the workload asks for"
    assert rules["queue"]["by"] == "policy"
