"""``kgov why`` / ``kgov status`` benchmark: a large cluster joined in memory.

The snapshot is the one recorded from the e2e cluster (``tests/data/why/bundled.json``: the
bundled platform, research's ``finetune`` waiting for a rack) scaled up: its 8 nodes copied into
``--racks`` racks of 2 (new names and rack, block and spine labels, as many blocks of 2 racks),
its pending ``finetune`` Workload copied ``--pending`` times (new names and creation times).

Prints the median wall time of:

- ``load``: parsing the snapshot's JSON (the baseline: what any report must read);
- ``why``: :func:`~webhook.why.explain.explain` of the last pending Workload (its position among
  all the others, quota, every node's exclusion and every domain's free capacity);
- ``status``: ``kgov status`` rows (each team's oldest pending Workload explained);
- ``status --team``: every research Workload with its cause (pending ones of the same shape
  share one placement; the queue order is sorted once per ClusterQueue).

Each as wall and CPU time and as a ratio of ``load``.

Run: ``python benchmarks/bench_why.py [--racks N] [--pending N] [--repeat N]``.
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any

from timing import load_at_end, median_times

from webhook.why.explain import explain
from webhook.why.snapshot import Snapshot
from webhook.why.status import team_statuses

SOURCE = Path(__file__).resolve().parents[1] / "tests" / "data" / "why" / "bundled.json"
LAYERS = [f"topology.k8s.aws/network-node-layer-{n}" for n in (1, 2, 3)]


def scaled(racks: int, pending: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SOURCE.read_text())
    template = data["nodes"][0]
    nodes = []
    for rack in range(racks):
        for host in range(2):
            node = copy.deepcopy(template)
            name = f"gpu-{rack}-{host}"
            labels = node["metadata"]["labels"]
            labels.update(
                {
                    "kubernetes.io/hostname": name,
                    LAYERS[0]: f"spine-{rack // 64}",
                    LAYERS[1]: f"block-{rack // 2}",
                    LAYERS[2]: f"rack-{rack}",
                }
            )
            node["metadata"]["name"] = name
            nodes.append(node)
    data["nodes"] = nodes
    finetune = next(w for w in data["workloads"] if w["metadata"]["name"].startswith("job-finetune"))
    for index in range(pending):
        copy_ = copy.deepcopy(finetune)
        copy_["metadata"]["name"] = f"job-copy-{index}"
        copy_["metadata"]["uid"] = f"uid-{index}"
        copy_["metadata"]["creationTimestamp"] = f"2026-12-01T09:{index // 60 % 60:02d}:{index % 60:02d}Z"
        data["workloads"].append(copy_)
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--racks", type=int, default=1000)
    parser.add_argument("--pending", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    text = json.dumps(scaled(args.racks, args.pending))
    snapshot = Snapshot.from_dump(json.loads(text))
    last = snapshot.workloads[-1]
    pending = args.pending + 1
    print(
        f"{len(snapshot.nodes)} nodes, {len(snapshot.workloads)} Workloads ({pending} pending), "
        f"{len(text) / 1e6:.1f} MB"
    )

    def why() -> object:
        snapshot.free, snapshot.memo = None, {}
        return explain(snapshot, last, "Workload", last["metadata"]["namespace"], last["metadata"]["name"])

    def status() -> object:
        snapshot.free, snapshot.memo = None, {}
        return team_statuses(snapshot)

    def team() -> object:
        snapshot.free, snapshot.memo = None, {}
        return team_statuses(snapshot, "research")

    load, load_cpu = median_times(lambda: Snapshot.from_dump(json.loads(text)), args.repeat)
    print(f"   {'step':<16} {'wall s':>8} {'x load':>8} {'cpu s':>8} {'x load':>8}")
    print(f"   {'load (baseline)':<16} {load:8.3f} {1:8.2f} {load_cpu:8.3f} {1:8.2f}")
    for name, run in (("why", why), ("status", status), ("status --team", team)):
        took, took_cpu = median_times(run, args.repeat)
        print(f"   {name:<16} {took:8.3f} {took / load:8.2f} {took_cpu:8.3f} {took_cpu / load_cpu:8.2f}")
    print(load_at_end())


if __name__ == "__main__":
    main()
