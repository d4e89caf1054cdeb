"""Build (once) and locate the binaries and manifests of the local e2e cluster.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy, the Kueue
manager, KWOK, the JobSet and the Kubeflow Trainer controller managers are compiled from their Go
modules in small wrapper modules under ``e2e/build/<wrapper>/`` whose ``go.mod``/``go.sum`` pin
every dependency (``tool`` directives name the main packages). The binaries of one wrapper (the
five Kubernetes components) are built by one ``go build``, so their common packages are compiled
once. Binaries are cached outside the repository in
``${KGOV_CACHE:-~/.cache/kueue-governor}/bin/<name>-<version>`` and rebuilt only when missing.

The YAML that the control plane needs (Kueue's CRDs, webhook configurations and default
Configuration; the CRDs of the workload kinds Kueue integrates with, at the versions Kueue pins)
is read from the same modules, fetched with ``go mod download -json``; Kueue's example manifests,
which its module leaves out, from its git repository at the tag (:mod:`e2e.kueue_examples`).

Command line::

    python -m e2e.build                 # build what is missing, print the paths as JSON
    python -m e2e.build --force kueue   # rebuild one binary
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

BUILD_DIR = Path(__file__).resolve().parent / "build"

ETCD_VERSION = "v3.6.16"
# The newest Kubernetes release Kueue v0.19.2 runs its e2e suite against (hack/make/test.mk,
# E2E_K8S_VERSIONS) and whose client libraries (v0.36) it is built with.
KUBERNETES_VERSION = "v1.36.1"
KUEUE_VERSION = "v0.19.2"
KWOK_VERSION = "v0.8.0"
# The JobSet release Kueue v0.19.2 is built against (its go.mod), so the controller runs the same
# API types as the CRDs installed and Kueue's jobset integration.
JOBSET_VERSION = "v0.12.0"
# The Kubeflow Trainer release Kueue v0.19.2 is built against (its go.mod): Kueue's TrainJob
# integration builds a TrainJob's podsets with this version's runtime code.
TRAINER_VERSION = "v2.2.1"
HELM_VERSION = "v3.22.0"


def _kubernetes_version_ldflags(version: str, commit: str) -> list[str]:
    """The ``-X`` flags that Kubernetes' own release build (hack/lib/version.sh) sets.

    Without them ``/version`` reports ``v0.0.0-master``, which Kueue refuses to parse.
    """
    major, minor = version.lstrip("v").split(".")[:2]
    values = {
        "gitVersion": version,
        "gitMajor": major,
        "gitMinor": minor,
        "gitCommit": commit,
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
    }
    flags = []
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X '{package}.{name}={value}'" for name, value in values.items() if value]
    return flags


def _kueue_version_ldflags(version: str, commit: str) -> list[str]:
    flags = [f"-X 'sigs.k8s.io/kueue/pkg/version.GitVersion={version}'"]
    if commit:
        flags.append(f"-X 'sigs.k8s.io/kueue/pkg/version.GitCommit={commit}'")
    return flags


def _jobset_version_ldflags(version: str, commit: str) -> list[str]:
    """JobSet's release build (its Makefile, ``LD_FLAGS``) sets ``pkg/version``."""
    flags = [f"-X 'sigs.k8s.io/jobset/pkg/version.GitVersion={version}'"]
    if commit:
        flags.append(f"-X 'sigs.k8s.io/jobset/pkg/version.GitCommit={commit}'")
    return flags


def _kwok_version_ldflags(version: str) -> list[str]:
    """KWOK's release build (hack/releases.sh) sets ``pkg/consts.Version``."""
    return [f"-X 'sigs.k8s.io/kwok/pkg/consts.Version={version}'"]


@dataclass(frozen=True)
class Binary:
    """One binary: which wrapper module builds it, from which main package, at which version.

    ``wrapper_name`` is the directory under ``e2e/build/`` (default: the binary's name); the
    binaries that share one are built together by one ``go build`` (so their ``ldflags`` must be
    the same).
    """

    name: str
    module: str
    version: str
    package: str
    ldflags: list[str] = field(default_factory=list)
    wrapper_name: str = ""

    @property
    def wrapper(self) -> Path:
        """The wrapper module directory (holds go.mod/go.sum)."""
        return BUILD_DIR / (self.wrapper_name or self.name)


# kubelet and kube-proxy run the real node (e2e/devcluster/node.py) beside the simulated ones.
KUBERNETES_COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy")


def binaries() -> list[Binary]:
    """The binaries of the cluster, in the order they are built (smallest first)."""
    kubernetes_ldflags = _kubernetes_version_ldflags(
        KUBERNETES_VERSION, module_origin_commit("k8s.io/kubernetes", KUBERNETES_VERSION)
    )
    return [
        Binary("etcd", "go.etcd.io/etcd/server/v3", ETCD_VERSION, "go.etcd.io/etcd/server/v3"),
        *(
            Binary(
                component,
                "k8s.io/kubernetes",
                KUBERNETES_VERSION,
                f"k8s.io/kubernetes/cmd/{component}",
                kubernetes_ldflags,
                wrapper_name="kubernetes",
            )
            for component in KUBERNETES_COMPONENTS
        ),
        Binary(
            "kueue",
            "sigs.k8s.io/kueue",
            KUEUE_VERSION,
            "sigs.k8s.io/kueue/cmd/kueue",
            _kueue_version_ldflags(KUEUE_VERSION, module_origin_commit("sigs.k8s.io/kueue", KUEUE_VERSION)),
        ),
        Binary(  # the chart tests' helm (lint, template, install/upgrade/uninstall); version ldflags as its Makefile
            "helm",
            "helm.sh/helm/v3",
            HELM_VERSION,
            "helm.sh/helm/v3/cmd/helm",
            [f"-X 'helm.sh/helm/v3/internal/version.version={HELM_VERSION}'"]
            # The Kubernetes version helm assumes offline: that of the client-go it is built with (v0.37).
            + [
                f"-X 'helm.sh/helm/v3/pkg/{p}.k8sVersion{n}={v}'"
                for p in ("chartutil", "lint/rules")
                for n, v in (("Major", "1"), ("Minor", "37"))
            ],
        ),
        Binary(
            "kwok", "sigs.k8s.io/kwok", KWOK_VERSION, "sigs.k8s.io/kwok/cmd/kwok", _kwok_version_ldflags(KWOK_VERSION)
        ),
        Binary(  # the JobSet controller manager (its main package is the module root)
            "jobset",
            "sigs.k8s.io/jobset",
            JOBSET_VERSION,
            "sigs.k8s.io/jobset",
            _jobset_version_ldflags(JOBSET_VERSION, module_origin_commit("sigs.k8s.io/jobset", JOBSET_VERSION)),
        ),
        Binary(  # the Kubeflow Trainer controller manager (TrainJob → JobSet), no version ldflags in its release
            "trainer",
            "github.com/kubeflow/trainer/v2",
            TRAINER_VERSION,
            "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager",
        ),
    ]


def cache_dir() -> Path:
    """``$KGOV_CACHE``, or ``~/.cache/kueue-governor``."""
    env = os.environ.get("KGOV_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "kueue-governor"


def binary_path(binary: Binary) -> Path:
    """Where the cached binary lives: ``<cache>/bin/<name>-<version>``."""
    return cache_dir() / "bin" / f"{binary.name}-{binary.version}"


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("CGO_ENABLED", "0")
    flags = env.get("GOFLAGS", "")
    if "-buildvcs" not in flags:
        env["GOFLAGS"] = (flags + " -buildvcs=false").strip()
    return env


def _go_mod_download(argument: str, cwd: Path) -> dict[str, object]:
    proc = subprocess.run(
        ["go", "mod", "download", "-json", argument],
        cwd=cwd,
        env=_go_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        info: dict[str, object] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        info = {"Error": proc.stderr.strip() or proc.stdout.strip()}
    if proc.returncode != 0 or "Error" in info:
        raise RuntimeError(f"go mod download {argument} failed: {info.get('Error')}")
    return info


def go_mod_download(module: str, version: str) -> dict[str, object]:
    """Run ``go mod download -json MODULE@VERSION`` and return its JSON.

    Raises:
        RuntimeError: the module proxy refused or could not serve the module (its message
            is included).
    """
    with tempfile.TemporaryDirectory() as scratch:  # outside any module: no go.mod to consult
        return _go_mod_download(f"{module}@{version}", Path(scratch))


def dependency_dir(wrapper: str, module: str) -> Path:
    """Source directory of MODULE at the version the wrapper module ``e2e/build/<wrapper>`` pins.

    E.g. ``dependency_dir("kueue", "sigs.k8s.io/jobset")`` is JobSet at the release Kueue is
    built against, so the CRDs installed match the API types compiled into Kueue.

    Raises:
        RuntimeError: MODULE is not in the wrapper's build list, or could not be downloaded.
    """
    return Path(str(_go_mod_download(module, BUILD_DIR / wrapper)["Dir"]))


def module_dir(module: str, version: str) -> Path:
    """The read-only source directory of MODULE@VERSION in the Go module cache."""
    return Path(str(go_mod_download(module, version)["Dir"]))


def module_origin_commit(module: str, version: str) -> str:
    """The VCS commit a module version was cut from, when the proxy records it ("" otherwise)."""
    info = go_mod_download(module, version)
    origin = info.get("Origin")
    if isinstance(origin, dict):
        return str(origin.get("Hash", ""))
    return ""


def build(binary: Binary, force: bool = False, log: bool = True) -> Path:
    """Build BINARY into the cache unless it is already there; return its path.

    Raises:
        subprocess.CalledProcessError: ``go build`` failed (its output went to stderr).
    """
    return build_together([binary], force=force, log=log)[binary.name]


def build_together(group: list[Binary], force: bool = False, log: bool = True) -> dict[str, Path]:
    """Build the binaries of one wrapper module that are missing (all of them with ``force``)
    with one ``go build``, so the packages they share are compiled once.

    Each binary is written to a temporary directory and renamed into the cache, so an
    interrupted build never leaves a truncated file behind that would later count as cached.

    Returns:
        name -> path of the executable, for every binary of ``group``.

    Raises:
        ValueError: the binaries do not share one wrapper module and one set of ldflags.
        subprocess.CalledProcessError: ``go build`` failed (its output went to stderr).
    """
    if len({(b.wrapper, tuple(b.ldflags)) for b in group}) > 1:
        raise ValueError(f"{[b.name for b in group]} do not share one wrapper module and ldflags")
    paths = {b.name: binary_path(b) for b in group}
    missing = [b for b in group if force or not paths[b.name].exists()]
    if not missing:
        return paths
    cache_bin = cache_dir() / "bin"
    cache_bin.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    if log:
        names = ", ".join(f"{b.name} {b.version}" for b in missing)
        print(f"building {names} (in {missing[0].wrapper.name})", file=sys.stderr)
    with tempfile.TemporaryDirectory(dir=cache_bin, prefix=".partial-") as scratch:
        # With several packages, `-o DIR/` writes each main package as DIR/<last path element>.
        output = f"{scratch}/" if len(missing) > 1 else f"{scratch}/{missing[0].package.rsplit('/', 1)[-1]}"
        command = [
            "go",
            "build",
            "-trimpath",
            "-ldflags=" + " ".join(["-s", "-w", *missing[0].ldflags]),
            "-o",
            output,
            *(b.package for b in missing),
        ]
        subprocess.run(command, cwd=missing[0].wrapper, env=_go_env(), check=True)
        for b in missing:
            (Path(scratch) / b.package.rsplit("/", 1)[-1]).replace(paths[b.name])
    if log:
        print(f"built {', '.join(b.name for b in missing)} in {time.monotonic() - started:.0f}s", file=sys.stderr)
    return paths


def ensure_binaries(force: set[str] | None = None) -> dict[str, Path]:
    """Build every missing binary, one wrapper module after the other (memory stays sane on
    small machines).

    Returns:
        name ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kueue",
        "kwok", "helm", "jobset", "trainer", "kubelet", "kube-proxy") -> path of the executable.
    """
    if shutil.which("go") is None and not all(binary_path(b).exists() for b in binaries()):
        raise RuntimeError("the Go toolchain is needed to build the e2e cluster binaries")
    force = force or set()
    groups: dict[Path, list[Binary]] = {}
    for b in binaries():
        groups.setdefault(b.wrapper, []).append(b)
    paths: dict[str, Path] = {}
    for group in groups.values():
        forced = [b for b in group if b.name in force]
        if forced:
            paths |= build_together(forced, force=True)
        paths |= build_together(group)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.build", description=__doc__.splitlines()[0])
    parser.add_argument("--force", nargs="*", default=[], metavar="NAME", help="rebuild these")
    args = parser.parse_args(argv)
    started = time.monotonic()
    paths = ensure_binaries(set(args.force))
    # Fetch the module holding Kueue's manifests now too, so `up` needs nothing more.
    kueue = module_dir("sigs.k8s.io/kueue", KUEUE_VERSION)
    # And Kueue's example manifests, which its module leaves out (e2e/test_kueue_examples.py).
    from e2e.kueue_examples import fetch_examples  # here: that module imports this one

    try:
        examples: str = str(fetch_examples(KUEUE_VERSION))
    except RuntimeError as exc:
        # Kueue's git repository is not always reachable (the Go module proxy may be the only
        # way out): the examples module then skips, saying why, and the rest of the suite runs.
        print(f"e2e.build: Kueue's examples not fetched: {exc}", file=sys.stderr)
        examples = ""
    found = {"binaries": {name: str(path) for name, path in paths.items()}, "kueue": str(kueue)}
    print(json.dumps(found | {"kueue-examples": str(examples)}, indent=2))
    print(f"done in {time.monotonic() - started:.0f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
