"""``kgov topology`` benchmark (SPEC §9, §11): a 10,000-node inventory as a table and a PNG.

The inventory is synthetic and seeded: ``--spines`` layer-1 domains × ``--blocks`` layer-2 ×
``--racks`` layer-3 × ``--hosts`` nodes (default 5 × 10 × 25 × 8 = 10,000), 8 GPUs each, every
second node running pods that request 1-8 GPUs, one node in 50 NotReady, one in 70 cordoned.
The dumps are written to a temporary directory as ``kubectl get nodes|pods -o json`` would.

Prints the median wall time of:

- ``load``: reading the node and pod dumps (``webhook.kube.files.load_objects``: the YAML
  or JSON parse every input file goes through), the baseline no report can avoid;
- ``tree``: building the tree and counting the pods' requests;
- ``table``: tree + :func:`~webhook.topology.render.render_table` (the default report);
- ``png``: tree + :func:`~webhook.topology.picture.render_picture` to a PNG file (matplotlib
  imported beforehand: the import is a one-time cost, printed separately);

each as a ratio of ``load``. Goal: the report (``load`` + ``table``) under 1 s here.

Run: ``python benchmarks/bench_topology.py [--spines N --blocks N --racks N --hosts N] [--repeat N]
[--keep DIR]`` (``--keep`` writes the dumps and the PNG there for a look).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from timing import load_at_end, median_times

from webhook.kube.files import load_objects
from webhook.topology.render import render_table
from webhook.topology.tree import TopologyTree, default_levels

GPU = "nvidia.com/gpu"


def inventory(spines: int, blocks: int, racks: int, hosts: int, seed: int = 7) -> tuple[list[Any], list[Any]]:
    """(nodes, pods) of a synthetic cluster, as API objects."""
    rng = random.Random(seed)
    nodes: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    resources = {"cpu": "191450m", "memory": "2064384Mi", GPU: "8", "vpc.amazonaws.com/efa": "32", "pods": "110"}
    index = 0
    for s in range(spines):
        for b in range(blocks):
            for r in range(racks):
                for h in range(hosts):
                    index += 1
                    name = f"ip-10-{s}-{b * racks + r}-{h}.ec2.internal"
                    spec: dict[str, Any] = {"providerID": f"aws:///us-east-1a/i-{index:017x}"}
                    if index % 70 == 0:
                        spec["unschedulable"] = True
                    ready = "False" if index % 50 == 0 else "True"
                    nodes.append(
                        {
                            "apiVersion": "v1",
                            "kind": "Node",
                            "metadata": {
                                "name": name,
                                "labels": {
                                    "kubernetes.io/hostname": name,
                                    "node.kubernetes.io/instance-type": "p5.48xlarge",
                                    "topology.k8s.aws/network-node-layer-1": f"nn-{s:02d}",
                                    "topology.k8s.aws/network-node-layer-2": f"nn-{s:02d}{b:02d}",
                                    "topology.k8s.aws/network-node-layer-3": f"nn-{s:02d}{b:02d}{r:02d}",
                                },
                            },
                            "spec": spec,
                            "status": {"allocatable": resources, "conditions": [{"type": "Ready", "status": ready}]},
                        }
                    )
                    if index % 2 == 0:
                        gpus = rng.randint(1, 8)
                        pods.append(
                            {
                                "apiVersion": "v1",
                                "kind": "Pod",
                                "metadata": {"name": f"worker-{index}", "namespace": "team-a"},
                                "spec": {
                                    "nodeName": name,
                                    "containers": [
                                        {"name": "main", "resources": {"requests": {GPU: str(gpus), "cpu": "8"}}}
                                    ],
                                },
                                "status": {"phase": "Running"},
                            }
                        )
    return nodes, pods


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--spines", type=int, default=5)
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--racks", type=int, default=25)
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="directory to keep the dumps and the PNG in")
    args = parser.parse_args()

    nodes, pods = inventory(args.spines, args.blocks, args.racks, args.hosts)
    directory = args.keep or Path(tempfile.mkdtemp(prefix="kgov-bench-topology-"))
    directory.mkdir(parents=True, exist_ok=True)
    nodes_file, pods_file = directory / "nodes.json", directory / "pods.json"
    nodes_file.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}))
    pods_file.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}))
    png = directory / "topology.png"

    start = time.perf_counter()
    import matplotlib.collections
    import matplotlib.figure
    import matplotlib.patches  # noqa: F401  (what render_picture imports on first use)

    from webhook.topology.picture import render_picture

    import_time = time.perf_counter() - start

    def load() -> tuple[list[Any], list[Any]]:
        return load_objects(nodes_file, "Node"), load_objects(pods_file, "Pod")

    loaded_nodes, loaded_pods = load()

    def tree() -> TopologyTree:
        built = TopologyTree(loaded_nodes, default_levels(loaded_nodes), GPU)
        built.add_pods(loaded_pods)
        return built

    def table() -> str:
        return render_table(tree())

    def picture() -> None:
        render_picture(tree(), png, "png")

    figures = {
        "load (baseline)": median_times(load, args.repeat),
        "tree": median_times(tree, args.repeat),
        "table": median_times(table, args.repeat),
        "png": median_times(picture, args.repeat),
    }
    built = tree()
    root = built.root
    print(
        f"kgov topology: {len(nodes)} nodes ({args.spines}x{args.blocks}x{args.racks}x{args.hosts}), "
        f"{len(pods)} bound pods, {root.unavailable} nodes unavailable, {GPU} {root.free}/{root.allocatable} free; "
        f"median of {args.repeat}; Python {sys.version.split()[0]}"
    )
    baseline, baseline_cpu = figures["load (baseline)"]
    print(f"   {'step':<18}{'wall s':>9}{'x load':>9}{'cpu s':>9}{'x load':>9}")
    for name, (seconds, cpu) in figures.items():
        print(f"   {name:<18}{seconds:>9.3f}{seconds / baseline:>9.2f}{cpu:>9.3f}{cpu / baseline_cpu:>9.2f}")
    report, report_cpu = baseline + figures["table"][0], baseline_cpu + figures["table"][1]
    verdict = "met" if report < 1 else "met in CPU time" if report_cpu < 1 else "MISSED"
    print(f"   report (load + table): {report:.3f} s wall, {report_cpu:.3f} s CPU; goal < 1 s: {verdict}")
    drawn, drawn_cpu = baseline + figures["png"][0], baseline_cpu + figures["png"][1]
    print(f"   picture (load + png): {drawn:.3f} s wall, {drawn_cpu:.3f} s CPU; matplotlib import {import_time:.3f} s")
    kgov = [sys.executable, "-m", "webhook.cli"]
    startup = median_times(lambda: subprocess.run([*kgov, "--version"], check=True, capture_output=True), args.repeat)
    command = median_times(
        lambda: subprocess.run(
            [*kgov, "topology", "--nodes", str(nodes_file), "--pods", str(pods_file)], check=True, capture_output=True
        ),
        args.repeat,
    )
    print(
        f"   whole command `kgov topology --nodes --pods` (table): {command[0]:.3f} s wall, "
        f"of which {startup[0]:.3f} s is `kgov --version` (interpreter and CLI start)"
    )
    print(load_at_end())
    print(f"   table lines: {render_table(built).count(chr(10))}, PNG: {png.stat().st_size // 1024} KiB ({png})")


if __name__ == "__main__":
    main()
