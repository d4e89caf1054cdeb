"""Placement benchmark on real Kueue: topology policies on seeded job streams, per seed and shape.

For each policy in turn a fresh simulated cluster (``e2e.devcluster``: kube-apiserver, Kueue
v0.19.2, kube-controller-manager, kube-scheduler, the JobSet controller for JobSets, KWOK nodes
``SxBxRxH`` with layer-1/2/3 network labels) is brought up in a temporary state directory, the
policy's platform file (one team, ``bench``, whose quota is the whole cluster) is generated and
applied, and ``kgov serve`` runs as the admission webhook with it. Then the same stream
(:mod:`.stream`) is submitted on its schedule (each job a JobSet, or a pod group's Pods); KWOK
runs each bound pod and completes it after the job's run time. Observation ends when every job
has finished, or ``--drain`` seconds after the horizon. Then the Nodes, Workloads and Pods are
read and :mod:`.metrics` computes the figures.

Job shapes (``--shape-kind``, a JobSet or a pod group) and policies: :mod:`.jobs`.

Policies (the team's ``policy.topology`` in the platform file):

- ``implicit``: ``mode: none``, no TAS annotation; Kueue's TAS-only ClusterQueue places each
  podset as if unconstrained (its implied topology request);
- ``required-L3``: ``mode: required`` at layer 3 (a rack), HyperPod's manual habit;
- ``preferred-L3``: ``mode: preferred`` at layer 3;
- ``auto``: ``mode: auto`` with no ``level`` (whatever the governor's ``auto`` does: ``required``
  at the level it picks, the default ``autoConstraint``);
- ``auto-preferred``: the same with ``autoConstraint: preferred``, so that one run measures both
  and decides the default;
- ``auto-patient``: ``mode: auto`` with a ``patience`` (``--patience``): a Workload pending for
  topology longer than that is widened by ``kgov serve``; several patiences give one policy each
  (``auto-patient-30s``...), the frontier of patience against locality and wait.

Several seeds (``--seeds``) and cluster shapes (``--shapes``) make several *runs*, each every
policy on one seed's stream on one shape; :mod:`.summary` then gives each figure per seed, its
spread, and each ``auto`` policy's ratio to ``implicit`` of the same run.

    python -m benchmarks.placement                                # 4x4x4x4: 256 nodes (long)
    python -m benchmarks.placement --shape 1x2x2x4 --horizon 120  # 16 nodes, a few minutes per policy
    python -m benchmarks.placement --seeds 1,2,3 --shapes 2x2x4x4,1x2x2x4 --policies implicit,auto-patient
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform as python_platform
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from e2e import devcluster
from e2e.manifests import TOPOLOGY_LEVELS, TopologyShape
from e2e.support import KUEUE_API, create, is_true, list_objects

from .jobs import (
    DEFAULT_PATIENCE,
    JOBSET_API,
    NAMESPACE,
    PATIENT,
    POLICY_NAMES,
    SHAPE_DESCRIPTIONS,
    SHAPE_KINDS,
    WIDENING_OPTIONS,
    job_jobset,
    job_pods,
    patience_order,
    platform_file,
    policies,
)
from .metrics import PolicyMetrics, policy_metrics, trim_snapshot, workload_job
from .report import CANDIDATES, goals, table
from .stream import Job, StreamParameters, describe_stream, make_stream
from .summary import RunKey, candidates, summary, verdict


async def run_policy(kubeconfig: str, jobs: Sequence[Job], args: argparse.Namespace) -> dict[str, Any]:
    """Submit ``jobs`` on their schedule, observe until done or ``horizon + drain``; return the
    untrimmed objects and times (``t0`` epoch seconds; ``end`` and ``lag`` seconds)."""
    async with devcluster.dynamic_client(kubeconfig) as dynamic:
        limit = asyncio.Semaphore(args.concurrency)
        lags: list[float] = []
        errors: list[str] = []
        t0 = time.time()

        async def submit(job: Job) -> None:
            await asyncio.sleep(max(0.0, t0 + job.arrival - time.time()))
            lags.append(time.time() - t0 - job.arrival)

            async def one(body: dict[str, Any]) -> None:
                async with limit:
                    try:
                        await create(dynamic, body)
                    except Exception as error:  # reported, counted, never silent
                        errors.append(f"{body['kind']} {body['metadata']['name']}: {error}")

            bodies = [job_jobset(job)] if args.shape_kind == "jobset" else job_pods(job)
            await asyncio.gather(*(one(body) for body in bodies))

        submitting = asyncio.gather(*(submit(job) for job in jobs))
        names = {job.name for job in jobs}
        last_print = 0.0
        while True:
            await asyncio.sleep(args.poll)
            now = time.time() - t0
            workloads = [
                w for w in await list_objects(dynamic, KUEUE_API, "Workload", NAMESPACE) if workload_job(w) in names
            ]
            admitted = sum(1 for w in workloads if is_true(w, "Admitted") or is_true(w, "Finished"))
            finished = sum(1 for w in workloads if is_true(w, "Finished"))
            if now - last_print >= 30:
                last_print = now
                print(
                    f"    t={now:5.0f}s  workloads {len(workloads)}/{len(jobs)}  admitted {admitted}  "
                    f"finished {finished}",
                    flush=True,
                )
            if (
                submitting.done()
                and now >= args.horizon
                and (finished == len(jobs) or now >= args.horizon + args.drain)
            ):
                break
        await submitting
        end = time.time() - t0
        return {
            "t0": t0,
            "end": end,
            "lag": max(lags, default=0.0),
            "errors": errors,
            "nodes": await list_objects(dynamic, "v1", "Node"),
            "workloads": await list_objects(dynamic, KUEUE_API, "Workload", NAMESPACE),
            "pods": await list_objects(dynamic, "v1", "Pod", NAMESPACE),
            "owners": await list_objects(dynamic, JOBSET_API, "JobSet", NAMESPACE)
            if args.shape_kind == "jobset"
            else [],
        }


def run_one(
    name: str, rule: dict[str, Any], shape: TopologyShape, jobs: Sequence[Job], root: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """A fresh cluster, the policy's platform and governor, the stream; the trimmed snapshot."""
    platform_path = root.parent / f"platform-{name}.yaml"
    platform_path.write_text(yaml.safe_dump(platform_file(shape, rule), sort_keys=False))
    started, load_before = time.monotonic(), _load()
    try:
        info = devcluster.up(root, shape=shape, jobset_controller=args.shape_kind == "jobset")
        devcluster.apply_platform(root, platform_path)
        devcluster.start_governor(root, platform_path, extra=WIDENING_OPTIONS)
        print(f"  {name}: cluster up in {time.monotonic() - started:.0f} s; submitting {len(jobs)} jobs", flush=True)
        raw = asyncio.run(run_policy(info.kubeconfig, jobs, args))
    finally:
        devcluster.down(root)
    base = {
        "policy": name,
        "shapeKind": args.shape_kind,
        "topologyRule": rule,
        "levels": list(TOPOLOGY_LEVELS),
        "gpus_per_node": shape.gpus_per_node,
        "node_count": shape.node_count,
        "t0": raw["t0"],
        "horizon": args.horizon,
        "end": raw["end"],
        "lag": raw["lag"],
        "errors": raw["errors"],
        "load": [load_before, _load()],
        "jobs": [
            {
                "name": j.name,
                "arrival": j.arrival,
                "runtime": j.runtime,
                "gpus_per_pod": j.gpus_per_pod,
                "workers": j.workers,
            }
            for j in jobs
        ],
    }
    snapshot = trim_snapshot(base, raw["nodes"], raw["workloads"], raw["pods"], raw["owners"])
    print(
        f"  {name}: observed {raw['end']:.0f} s, worst submission lag {raw['lag']:.1f} s, "
        f"{len(raw['errors'])} create errors, 1-minute load average {load_before:.1f} then {_load():.1f}",
        flush=True,
    )
    for error in raw["errors"][:5]:
        print(f"    create error: {error}", flush=True)
    return snapshot


def _load() -> float:
    return os.getloadavg()[0]


def run_directory(output: Path, shape: str, seed: int) -> Path:
    """Where ``--output`` keeps one run's snapshots: ``DIR/<shape>-seed-<seed>/``."""
    return output / f"{shape}-seed-{seed}"


def load_saved(directory: Path) -> dict[RunKey, dict[str, dict[str, Any]]]:
    """The snapshots ``<policy>.json`` an earlier run wrote with ``--output directory``: in
    ``directory`` itself (one run, the earlier layout) and in each of its subdirectories (one run
    each), keyed by the run's shape and seed (read from the snapshot; an older one without them is
    keyed by its directory's name and seed 0), policies in :data:`POLICY_NAMES` order.

    Raises:
        ValueError: no snapshot, or the snapshots of one run are not of one stream.
    """
    runs: dict[RunKey, dict[str, dict[str, Any]]] = {}
    for folder in [directory, *sorted(p for p in directory.iterdir() if p.is_dir())]:
        found = {path.stem: json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))}
        if not found:
            continue
        snapshots = dict(sorted(found.items(), key=lambda kv: _policy_order(kv[0])))
        streams = {json.dumps(s["jobs"], sort_keys=True) for s in snapshots.values()}
        if len(streams) != 1:
            raise ValueError(f"the snapshots in {folder} are not of one stream (their jobs differ)")
        first = next(iter(snapshots.values()))
        runs[(str(first.get("shape", folder.name)), int(first.get("seed", 0)))] = snapshots
    if not runs:
        raise ValueError(f"no snapshot <policy>.json in {directory} or its subdirectories")
    return runs


def _policy_order(name: str) -> tuple[int, float, str]:
    """Sort key of a snapshot's policy name: :data:`POLICY_NAMES` order, patiences ascending."""
    if name.startswith(f"{PATIENT}-"):
        try:
            return POLICY_NAMES.index(PATIENT), patience_order(name.removeprefix(f"{PATIENT}-")), name
        except ValueError:
            pass
    return (POLICY_NAMES.index(name) if name in POLICY_NAMES else len(POLICY_NAMES)), 0.0, name


def print_runs(runs: dict[RunKey, dict[str, dict[str, Any]]]) -> None:
    """Each run's table (and issue 10's goals when it has ``auto`` or ``auto-preferred``), then the
    summary across seeds and shapes (over several runs), or the target of each ``auto`` policy (one run)."""
    results: dict[RunKey, dict[str, PolicyMetrics]] = {}
    for key, snapshots in runs.items():
        results[key] = {name: policy_metrics(s) for name, s in snapshots.items()}
        first = next(iter(snapshots.values()))
        print(first.get("header") or f"run {key[0]} seed {key[1]}")
        loads = ", ".join(f"{n} {s['load'][0]:.1f}-{s['load'][1]:.1f}" for n, s in snapshots.items() if "load" in s)
        if loads:
            print(f"1-minute load average at the start and end of each policy: {loads}")
        print(table(results[key]))
        if any(name in results[key] for name in CANDIDATES):
            print(goals(results[key]))
        print()
    if len(results) > 1:
        print(summary(results))
    else:
        print("\n\n".join(verdict(results, name) for name in candidates(results)))


def _patience(text: str) -> str:
    patience_order(text.strip())
    return text.strip()


def _list(text: str, convert: Any, option: str) -> list[Any]:
    try:
        values = [convert(item) for item in text.split(",") if item.strip()]
    except ValueError as error:
        raise ValueError(f"{option}: {error}") from None
    if not values:
        raise ValueError(f"{option}: give at least one value")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.placement", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shapes",
        "--shape",
        default="4x4x4x4",
        help="fake nodes SxBxRxH, comma-separated for several (default 4x4x4x4: 256 nodes)",
    )
    parser.add_argument("--seeds", "--seed", default="1", help="seeds of the stream, comma-separated (default 1)")
    parser.add_argument("--horizon", type=float, default=300.0, help="seconds over which jobs arrive")
    parser.add_argument("--load", type=float, default=0.9, help="offered load (node-seconds per node-second)")
    parser.add_argument("--min-runtime", type=int, default=15, help="seconds")
    parser.add_argument("--max-runtime", type=int, default=120, help="seconds")
    parser.add_argument("--max-job-nodes", type=int, default=64)
    parser.add_argument("--small-share", type=float, default=0.2, help="share of sub-node jobs")
    parser.add_argument("--drain", type=float, default=180.0, help="seconds observed after the horizon at most")
    parser.add_argument("--poll", type=float, default=5.0, help="seconds between progress reads")
    parser.add_argument("--concurrency", type=int, default=8, help="object creations in flight")
    parser.add_argument(
        "--shape-kind",
        choices=SHAPE_KINDS,
        default="jobset",
        help="each job a JobSet (default: the governor sees the whole job) or a Kueue pod group of Pods",
    )
    parser.add_argument(
        "--policies",
        default=",".join(POLICY_NAMES),
        help="comma-separated subset of " + ", ".join(POLICY_NAMES),
    )
    parser.add_argument(
        "--patience",
        default=DEFAULT_PATIENCE,
        help=f"{PATIENT}'s patience (90s, 5m, 1h30m or never); comma-separated for a frontier, one policy "
        f"each (default {DEFAULT_PATIENCE}, the platform file's)",
    )
    parser.add_argument(
        "--output", type=Path, help="directory for each run's snapshots (JSON), DIR/<shape>-seed-<seed>/"
    )
    parser.add_argument(
        "--from",
        dest="from_dir",
        type=Path,
        help="no cluster: print the tables from the snapshots an earlier run wrote with --output",
    )
    args = parser.parse_args(argv)
    # a SIGTERM (timeout, kill) unwinds like Ctrl-C, so each cluster is stopped by its ``finally``
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.from_dir is not None:
        try:
            print_runs(load_saved(args.from_dir))
        except (OSError, ValueError, KeyError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        return 0
    try:
        shapes = _list(args.shapes, TopologyShape.parse, "--shapes")
        seeds = _list(args.seeds, int, "--seeds")
        patiences = _list(args.patience, _patience, "--patience")
        chosen = policies(args.policies.split(","), patiences)
        streams = {(str(shape), seed): stream_parameters(shape, seed, args) for shape in shapes for seed in seeds}
        jobs_of = {key: make_stream(parameters) for key, parameters in streams.items()}
    except ValueError as error:
        parser.error(str(error))
    shape_of = {str(shape): shape for shape in shapes}
    runs: dict[RunKey, dict[str, dict[str, Any]]] = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kgov-placement-") as state:
        root = Path(state) / "cluster"
        for key, parameters in streams.items():
            shape, jobs = shape_of[key[0]], jobs_of[key]
            header = (
                f"placement benchmark: python {python_platform.python_version()}, {os.cpu_count()} CPUs, "
                f"load {_load():.1f}\n"
                f"cluster {shape} ({shape.node_count} nodes x {shape.gpus_per_node} GPUs; "
                f"{shape.racks * shape.hosts} nodes per layer-2 block, {shape.hosts} per layer-3 rack)\n"
                f"stream: {parameters.describe()}\n"
                f"        {describe_stream(jobs)}\n"
                f"jobs: {SHAPE_DESCRIPTIONS[args.shape_kind]}\n"
                f"observation: until every job finished or {args.drain:.0f} s after the horizon; "
                "a fresh cluster per policy"
            )
            print(header, flush=True)
            runs[key] = {}
            for name, rule in chosen:
                snapshot = {
                    "header": header,
                    "shape": key[0],
                    "seed": key[1],
                    **run_one(name, rule, shape, jobs, root, args),
                }
                runs[key][name] = snapshot
                if args.output is not None:
                    folder = run_directory(args.output, *key)
                    folder.mkdir(parents=True, exist_ok=True)
                    (folder / f"{name}.json").write_text(json.dumps(snapshot, indent=1) + "\n")
    print()
    print_runs(runs)
    print(
        f"\n{len(runs)} runs x {len(chosen)} policies in {(time.monotonic() - started) / 60:.0f} minutes; "
        f"1-minute load average at the end: {_load():.1f} on {os.cpu_count()} CPUs"
    )
    return 0


def stream_parameters(shape: TopologyShape, seed: int, args: argparse.Namespace) -> StreamParameters:
    """The stream of one run: ``seed`` on ``shape``'s nodes, the rest from the options."""
    return StreamParameters(
        seed=seed,
        nodes=shape.node_count,
        gpus_per_node=shape.gpus_per_node,
        horizon=args.horizon,
        load=args.load,
        min_runtime=args.min_runtime,
        max_runtime=args.max_runtime,
        max_job_nodes=args.max_job_nodes,
        small_share=args.small_share,
    )


if __name__ == "__main__":
    sys.exit(main())
