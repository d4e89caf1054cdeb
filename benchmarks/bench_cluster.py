"""The simulated cluster under load: 256 KWOK nodes and 2,000 Job pods admitted by Kueue.

Brings up the local cluster of ``e2e.devcluster`` (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, Kueue, KWOK) with ``--shape`` fake nodes in a temporary state directory, then:

1. baseline: the idle cluster for ``--idle`` seconds (KWOK renewing one Lease per node every 10 s,
   the controllers resyncing);
2. the run: ``--jobs`` Jobs of ``--pods`` pods (1 GPU each, every pod of a Job required in one
   layer-3 domain) through one ClusterQueue, each pod completing ``--complete-after`` after it
   runs; until every Job is Complete.

For each phase and process: CPU seconds (user + system, from /proc/<pid>/stat), the CPU share of
one core over the phase, and the peak resident memory (VmHWM). The ratio row is run/baseline
per second of wall time. Only 127.0.0.1 is used.

    python benchmarks/bench_cluster.py                  # 256 nodes, 250 Jobs x 8 pods
    python benchmarks/bench_cluster.py --shape 1x2x2x2 --jobs 10 --pods 2 --idle 10
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from e2e import devcluster, manifests
from e2e.support import KUEUE_API, create, is_true, list_objects

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
NAMESPACE = "bench"


@dataclass
class Sample:
    cpu_seconds: float
    peak_rss_mib: float


def sample(paths: devcluster.Paths) -> dict[str, Sample]:
    """CPU seconds so far and peak RSS of each running process of the cluster."""
    samples = {}
    for name in devcluster.CONTROL_PLANE:
        pid = devcluster.process_alive(paths, name)
        if pid is None:
            continue
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime
        status = dict(
            line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
        )
        samples[name] = Sample(cpu, int(status["VmHWM"].split()[0]) / 1024)
    return samples


def report(title: str, before: dict[str, Sample], after: dict[str, Sample], seconds: float) -> dict[str, float]:
    print(f"\n{title} ({seconds:.0f} s wall)")
    print(f"{'process':<26}{'CPU s':>9}{'% of a core':>13}{'peak RSS MiB':>14}")
    shares = {}
    for name in after:
        cpu = after[name].cpu_seconds - before[name].cpu_seconds
        shares[name] = cpu / seconds
        print(f"{name:<26}{cpu:>9.1f}{100 * cpu / seconds:>13.0f}{after[name].peak_rss_mib:>14.0f}")
    total = sum(after[n].cpu_seconds - before[n].cpu_seconds for n in after)
    shares["total"] = total / seconds
    print(
        f"{'total':<26}{total:>9.1f}{100 * total / seconds:>13.0f}{sum(s.peak_rss_mib for s in after.values()):>14.0f}"
    )
    return shares


def queue_objects(shape: manifests.TopologyShape) -> list[dict[str, Any]]:
    gpus = shape.node_count * shape.gpus_per_node
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": KUEUE_API,
            "kind": "Topology",
            "metadata": {"name": "net"},
            "spec": {"levels": [{"nodeLabel": level} for level in manifests.TOPOLOGY_LEVELS]},
        },
        {
            "apiVersion": KUEUE_API,
            "kind": "ResourceFlavor",
            "metadata": {"name": "p5"},
            "spec": {"nodeLabels": {manifests.INSTANCE_TYPE_LABEL: shape.instance_type}, "topologyName": "net"},
        },
        {
            "apiVersion": KUEUE_API,
            "kind": "ClusterQueue",
            "metadata": {"name": "bench"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "p5",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": str(gpus * 24)},
                                    {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": KUEUE_API,
            "kind": "LocalQueue",
            "metadata": {"name": "bench", "namespace": NAMESPACE},
            "spec": {"clusterQueue": "bench"},
        },
    ]


def job(index: int, pods: int, complete_after: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"job-{index:04d}", "namespace": NAMESPACE, "labels": {QUEUE_LABEL: "bench"}},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "template": {
                "metadata": {
                    "annotations": {
                        "kueue.x-k8s.io/podset-required-topology": manifests.TOPOLOGY_LEVELS[2],
                        "pod-complete.stage.kwok.x-k8s.io/delay": complete_after,
                        # KWOK caps the delay at the jitter bound (5 s unless set)
                        "pod-complete.stage.kwok.x-k8s.io/jitter-delay": complete_after,
                    }
                },
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {
                                "requests": {"cpu": "1", "nvidia.com/gpu": "1"},
                                "limits": {"nvidia.com/gpu": "1"},
                            },
                        }
                    ],
                },
            },
        },
    }


async def run_jobs(kubeconfig: str, shape: manifests.TopologyShape, args: argparse.Namespace) -> dict[str, float]:
    """Submit the Jobs; return the seconds until all pods had run and until all Jobs completed."""
    async with devcluster.dynamic_client(kubeconfig) as dynamic:
        for obj in queue_objects(shape):
            await create(dynamic, obj)
        while await list_objects(dynamic, "v1", "ServiceAccount", NAMESPACE) == []:
            await asyncio.sleep(0.2)
        started = time.monotonic()
        limit = asyncio.Semaphore(16)

        async def submit(index: int) -> None:
            async with limit:
                await create(dynamic, job(index, args.pods, args.complete_after))

        await asyncio.gather(*(submit(i) for i in range(args.jobs)))
        submitted = time.monotonic() - started
        total = args.jobs * args.pods
        peak_running = 0
        all_started = None
        deadline = started + args.timeout
        while time.monotonic() < deadline:
            jobs = await list_objects(dynamic, "batch/v1", "Job", NAMESPACE)
            complete = sum(1 for j in jobs if is_true(j, "Complete"))
            ran = sum(
                int((j.get("status") or {}).get("succeeded", 0)) + int((j.get("status") or {}).get("active", 0))
                for j in jobs
            )
            pods = await list_objects(dynamic, "v1", "Pod", NAMESPACE)
            peak_running = max(peak_running, sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running"))
            if all_started is None and ran >= total:
                all_started = time.monotonic() - started
            if complete == args.jobs:
                break
            await asyncio.sleep(2)
        else:
            raise SystemExit(f"timed out after {args.timeout:.0f}s: {complete}/{args.jobs} Jobs complete")
        workloads = await list_objects(dynamic, KUEUE_API, "Workload", NAMESPACE)
        finished = sum(1 for w in workloads if is_true(w, "Finished"))
        return {
            "submitted": submitted,
            "all_pods_created": all_started or float("nan"),
            "all_complete": time.monotonic() - started,
            "peak_running": float(peak_running),
            "finished_workloads": float(finished),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="4x4x4x4", help="fake nodes SxBxRxH (default 256 nodes)")
    parser.add_argument("--jobs", type=int, default=250)
    parser.add_argument("--pods", type=int, default=8, help="pods per Job")
    parser.add_argument("--complete-after", default="30s", help="KWOK pod-complete delay")
    parser.add_argument("--idle", type=float, default=60, help="seconds of the idle baseline")
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    shape = manifests.TopologyShape.parse(args.shape)
    print(
        f"python {platform.python_version()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; "
        f"{shape.node_count} nodes ({shape}), {args.jobs} Jobs x {args.pods} pods = {args.jobs * args.pods} pods"
    )
    with tempfile.TemporaryDirectory(prefix="kgov-bench-") as state:
        root = Path(state)
        paths = devcluster.Paths(root)
        started = time.monotonic()
        with devcluster.running_cluster(root, shape=shape) as info:
            print(f"cluster up with {shape.node_count} Ready nodes in {time.monotonic() - started:.1f} s")
            before = sample(paths)
            time.sleep(args.idle)
            idle = report("baseline: idle cluster", before, sample(paths), args.idle)
            before = sample(paths)
            t0 = time.monotonic()
            figures = asyncio.run(run_jobs(info.kubeconfig, shape, args))
            seconds = time.monotonic() - t0
            loaded = report(f"run: {args.jobs * args.pods} pods", before, sample(paths), seconds)
            print(
                f"\nsubmitted in {figures['submitted']:.1f} s; every pod created by "
                f"{figures['all_pods_created']:.1f} s; every Job Complete at {figures['all_complete']:.1f} s; "
                f"peak {figures['peak_running']:.0f} pods Running at once; "
                f"{figures['finished_workloads']:.0f} Workloads Finished"
            )
            print(f"ratio run/baseline (CPU per wall second, all processes): {loaded['total'] / idle['total']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
