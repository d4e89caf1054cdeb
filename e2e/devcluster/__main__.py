"""The command line, ``python -m e2e.devcluster up|down|status|governor|build`` (see the package
doc)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from e2e import build, devcluster
from e2e.devcluster.cluster import apply_platform, down, status, up
from e2e.devcluster.governor import start_governor
from e2e.devcluster.state import DevClusterError, state_dir
from e2e.image import ImageError
from e2e.manifests import TopologyShape


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m e2e.devcluster", description=(devcluster.__doc__ or "").partition("\n")[0]
    )
    parser.add_argument("--state-dir", help="default: $KGOV_E2E_STATE or e2e/.state")
    commands = parser.add_subparsers(dest="command", required=True)
    up_parser = commands.add_parser("up", help="start (or report) the local control plane")
    up_parser.add_argument("--shape", default=str(TopologyShape()), help="fake nodes: SxBxRxH or BxRxH")
    up_parser.add_argument(
        "--with-governor",
        metavar="PLATFORM",
        type=Path,
        help="also apply the platform's generated Kueue objects and namespaces, and run kgov serve",
    )
    up_parser.add_argument(
        "--with-jobset-controller",
        action="store_true",
        help="also run the JobSet controller manager (JobSets then create their Jobs and pods)",
    )
    up_parser.add_argument(
        "--real-node",
        action="store_true",
        help="also run one real node (containerd, kubelet, kube-proxy; root, `make e2e-node-deps`)",
    )
    down_parser = commands.add_parser("down", help="stop every process up started")
    down_parser.add_argument("--purge", action="store_true", help="also delete the state directory")
    commands.add_parser("status", help="processes and readiness, as JSON")
    governor_parser = commands.add_parser("governor", help="(re)start kgov serve on a running cluster")
    governor_parser.add_argument("platform", type=Path)
    commands.add_parser("build", help="build the binaries only")
    args = parser.parse_args(argv)
    root = state_dir(args.state_dir)
    try:
        if args.command == "up":
            started = time.monotonic()
            info = up(
                root,
                TopologyShape.parse(args.shape),
                args.with_governor,
                jobset_controller=args.with_jobset_controller,
                real_node=args.real_node,
            )
            if args.with_governor is not None:
                apply_platform(root, args.with_governor)
            print(f"control plane up in {time.monotonic() - started:.0f}s ({info.shape} nodes)", file=sys.stderr)
            print(info.kubeconfig)
        elif args.command == "down":
            stopped = down(root, purge=args.purge)
            print(f"stopped: {', '.join(stopped) or 'nothing was running'}", file=sys.stderr)
        elif args.command == "status":
            print(json.dumps(status(root), indent=2))
        elif args.command == "governor":
            print(start_governor(root, args.platform).governor_url)
        elif args.command == "build":
            print(json.dumps({k: str(v) for k, v in build.ensure_binaries().items()}, indent=2))
    except (DevClusterError, ImageError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
