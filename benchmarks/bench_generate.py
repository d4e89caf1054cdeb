"""Generator benchmark (SPEC §11): 1,000 teams × 8 flavors, against baselines from the same run.

Prints the median wall time of:

- ``parse``: validating the platform document (pydantic models and ``check_platform``), the work
  every ``kgov`` command does before anything else;
- ``dump``: YAML-dumping the generated objects alone, the floor for writing them;
- ``generate``: what ``kgov generate`` adds after parsing: the generator checks, building every
  object and rendering the files (headers, ``kustomization.yaml``);

and ``generate`` as a ratio of each baseline. Goal: ``generate`` under 2 s here.

Run: ``python benchmarks/bench_generate.py [--teams N] [--flavors N] [--repeat N]``.
"""

from __future__ import annotations

import argparse
from typing import Any

from timing import median_times

from webhook.core.platform.platform import parse_platform
from webhook.generate.manifests import GenerateOptions, build_manifests
from webhook.generate.render import dump_yaml, render_files
from webhook.generate.validate import validate_platform

RESOURCES = {"cpu": 1536, "memory": "16Ti", "nvidia.com/gpu": 64, "vpc.amazonaws.com/efa": 256}


def platform_document(teams: int, flavors: int) -> dict[str, Any]:
    """A platform file with ``flavors`` TAS flavors and ``teams`` teams quoting all of them."""
    flavor_names = [f"gpu-{i}" for i in range(flavors)]
    return {
        "apiVersion": "kueue-governor.io/v1alpha1",
        "kind": "Platform",
        "naming": "hyperpod",
        "topologies": [
            {
                "name": "aws-network",
                "levels": [
                    "topology.k8s.aws/network-node-layer-1",
                    "topology.k8s.aws/network-node-layer-2",
                    "topology.k8s.aws/network-node-layer-3",
                    "kubernetes.io/hostname",
                ],
            }
        ],
        "flavors": [
            {
                "name": name,
                "nodeLabels": {"node.kubernetes.io/instance-type": f"p5.{i}xlarge"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "topologyName": "aws-network",
            }
            for i, name in enumerate(flavor_names)
        ],
        "cohorts": [{"name": "org"}, *({"name": f"division-{i}", "parentName": "org"} for i in range(10))],
        "priorities": [
            {"name": "inference", "value": 1000, "podPriorityClass": True},
            {"name": "training", "value": 500, "podPriorityClass": True},
            {"name": "experimentation", "value": 100},
        ],
        "teams": [
            {
                "name": f"team-{t:04d}",
                "cohort": f"division-{t % 10}",
                "quotas": [
                    {
                        "flavor": name,
                        "resources": {
                            resource: {"nominalQuota": amount, "borrowingLimit": amount}
                            for resource, amount in RESOURCES.items()
                        },
                    }
                    for name in flavor_names
                ],
                "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
                "fairSharing": {"weight": 1 + t % 3},
                "policy": {
                    "kueuePriority": {"default": "training", "allowed": ["training", "experimentation"]},
                    "topology": {"mode": "preferred", "level": "topology.k8s.aws/network-node-layer-3"},
                },
            }
            for t in range(teams)
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teams", type=int, default=1000)
    parser.add_argument("--flavors", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    document = platform_document(args.teams, args.flavors)
    platform = parse_platform(document)
    options = GenerateOptions(namespaces=True)

    def generate() -> dict[str, str]:
        problems = validate_platform(platform)
        assert not [p for p in problems if p.severity == "error"], problems
        return render_files(build_manifests(platform, options), "../platform.yaml")

    files = generate()
    objects = [obj for objs in build_manifests(platform, options).values() for obj in objs]

    parse = median_times(lambda: parse_platform(document), args.repeat)[0]
    dump = median_times(lambda: dump_yaml(objects), args.repeat)[0]
    gen = median_times(generate, args.repeat)[0]

    size = sum(len(text) for text in files.values())
    print(f"platform: {args.teams} teams x {args.flavors} flavors x {len(RESOURCES)} resources")
    print(f"output:   {len(objects)} objects, {len(files)} files, {size / 1e6:.1f} MB of YAML")
    print(f"parse     (baseline) {parse * 1e3:8.1f} ms")
    print(f"dump      (baseline) {dump * 1e3:8.1f} ms")
    print(f"generate             {gen * 1e3:8.1f} ms   goal < 2000 ms: {'met' if gen < 2 else 'MISSED'}")
    print(f"ratio generate/parse {gen / parse:8.2f}")
    print(f"ratio generate/dump  {gen / dump:8.2f}")


if __name__ == "__main__":
    main()
