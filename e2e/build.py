"""Build (once) and locate the binaries and manifests of the local e2e control plane.

etcd, kube-apiserver and the Kueue manager are compiled from their Go modules, each in a small
wrapper module under ``e2e/build/<name>/`` whose ``go.mod``/``go.sum`` pin every dependency
(``tool`` directives name the main package).  Binaries are cached outside the repository in
``${KGOV_CACHE:-~/.cache/kueue-governor}/bin/<name>-<version>`` and rebuilt only when missing.

The YAML that the control plane needs (Kueue's CRDs, webhook configurations and default
Configuration; the CRDs of the workload kinds Kueue integrates with, at the versions Kueue pins)
is read from the same modules, fetched with ``go mod download -json``.

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
KUBERNETES_VERSION = "v1.34.4"
KUEUE_VERSION = "v0.17.0"
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


@dataclass(frozen=True)
class Binary:
    """One binary: which wrapper module builds it, from which main package, at which version."""

    name: str
    module: str
    version: str
    package: str
    ldflags: list[str] = field(default_factory=list)

    @property
    def wrapper(self) -> Path:
        """The wrapper module directory (holds go.mod/go.sum)."""
        return BUILD_DIR / self.name


def binaries() -> list[Binary]:
    """The binaries of the control plane, in the order they are built (smallest first)."""
    return [
        Binary("etcd", "go.etcd.io/etcd/server/v3", ETCD_VERSION, "go.etcd.io/etcd/server/v3"),
        Binary(
            "kube-apiserver",
            "k8s.io/kubernetes",
            KUBERNETES_VERSION,
            "k8s.io/kubernetes/cmd/kube-apiserver",
            _kubernetes_version_ldflags(
                KUBERNETES_VERSION, module_origin_commit("k8s.io/kubernetes", KUBERNETES_VERSION)
            ),
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

    The binary is written to a temporary name and renamed, so an interrupted build never leaves
    a truncated file behind that would later count as cached.

    Raises:
        subprocess.CalledProcessError: ``go build`` failed (its output went to stderr).
    """
    target = binary_path(binary)
    if target.exists() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    command = [
        "go",
        "build",
        "-trimpath",
        "-ldflags=" + " ".join(["-s", "-w", *binary.ldflags]),
        "-o",
        str(partial),
        binary.package,
    ]
    started = time.monotonic()
    if log:
        print(f"building {binary.name} {binary.version} ({binary.package})", file=sys.stderr)
    subprocess.run(command, cwd=binary.wrapper, env=_go_env(), check=True)
    partial.replace(target)
    if log:
        print(f"built {target} in {time.monotonic() - started:.0f}s", file=sys.stderr)
    return target


def ensure_binaries(force: set[str] | None = None) -> dict[str, Path]:
    """Build every missing binary, one after the other (memory stays sane on small machines).

    Returns:
        name ("etcd", "kube-apiserver", "kueue", "helm") -> path of the executable.
    """
    if shutil.which("go") is None and not all(binary_path(b).exists() for b in binaries()):
        raise RuntimeError("the Go toolchain is needed to build the e2e control plane binaries")
    force = force or set()
    return {b.name: build(b, force=b.name in force) for b in binaries()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.build", description=__doc__.splitlines()[0])
    parser.add_argument("--force", nargs="*", default=[], metavar="NAME", help="rebuild these")
    args = parser.parse_args(argv)
    started = time.monotonic()
    paths = ensure_binaries(set(args.force))
    # Fetch the module holding Kueue's manifests now too, so `up` needs nothing more.
    kueue = module_dir("sigs.k8s.io/kueue", KUEUE_VERSION)
    print(json.dumps({"binaries": {name: str(path) for name, path in paths.items()}, "kueue": str(kueue)}, indent=2))
    print(f"done in {time.monotonic() - started:.0f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
