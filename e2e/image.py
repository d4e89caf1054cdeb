"""The project's image (``kgov serve``, the chart's ``image``) and the pause image, built on this machine.

Three ways, the first that applies (``--builder auto``):

- **docker**: a Docker daemon answers. ``docker build`` of the project's ``Dockerfile``, unchanged;
  when the ``python`` base cannot be pulled (no registry reachable), the base is the local Debian
  root filesystem below, imported as ``kgov-base:bookworm`` with the machine's CA bundle for pip
  (that base is for local tests only). The result is ``docker save``'d to the archive.
- **daemonless** (CI, and machines without a daemon, root only): a Debian root filesystem made by
  ``mmdebstrap`` (``python3``, ``python3-venv``, ``python-is-python3``, CA certificates), the
  project installed into ``/opt/kueue-governor`` in a chroot exactly as the Dockerfile's build stage
  does, and the directory written as a one-layer OCI archive (:mod:`e2e.oci`) with the Dockerfile's
  runtime settings (user 65532:65532, entrypoint ``kgov``, ``PATH``, ``PYTHON*`` variables).

The pause image (the pod sandbox) is ``pause.c`` of the Kubernetes module the cluster is built from,
compiled statically with the system's C compiler.

Both archives are cached under ``${KGOV_CACHE:-~/.cache/kueue-governor}/image/`` keyed by the hash of
their inputs (the files the Dockerfile copies, the base's package list; ``pause.c``), so a second run
with the same sources only hashes them.

Command line::

    python -m e2e.image              # build what is missing, print the archives' paths as JSON
    python -m e2e.image --builder daemonless
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from e2e import build, oci

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "helm" / "kueue-governor"
# What the Dockerfile's build stage copies: the inputs of the image's hash.
IMAGE_INPUTS = ("pyproject.toml", "README.md", "webhook")
DEBIAN_SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
# Documentation, manual pages and translations are left out of the base (copyright files stay).
BASE_DPKG_OPTIONS = (
    "path-exclude=/usr/share/doc/*",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/doc/*/copyright",
)
VENV = "/opt/kueue-governor"
# Bump when the way the image is made changes (part of the image hash).
RECIPE_VERSION = "2"
RUNTIME = oci.ImageConfig(
    user="65532:65532",
    entrypoint=["kgov"],
    cmd=["serve", "--help"],
    env=[
        f"PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "PYTHONDONTWRITEBYTECODE=1",
        "PYTHONUNBUFFERED=1",
        "LANG=C.UTF-8",
    ],
    ports=["8443/tcp"],
)
# The sandbox image kubelet v1.36 expects (kubeadm's PauseVersion), built from the module's pause.c.
PAUSE_IMAGE = "registry.k8s.io/pause:3.10.2"
PAUSE_RUNTIME = oci.ImageConfig(user="65535:65535", entrypoint=["/pause"])
# The machine's CA bundle (it may hold the CA of an intercepting egress proxy): given to pip in the chroot.
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# Package-index settings passed into the chroot (its environment is otherwise empty).
PIP_PASSTHROUGH = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "PIP_DEFAULT_TIMEOUT")
PROXY_PASSTHROUGH = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")


class ImageError(RuntimeError):
    """An image could not be built (the message names the step and its output)."""


def image_name() -> str:
    """The full reference the chart's default ``image`` resolves to (``docker.io/library/<repo>:<appVersion>``)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    tag = values["image"]["tag"] or yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    return f"docker.io/library/{values['image']['repository']}:{tag}"


def image_dir() -> Path:
    """``<cache>/image``, where the base root filesystem and the archives are kept."""
    return build.cache_dir() / "image"


def _hash_paths(digest: Any, root: Path, names: tuple[str, ...]) -> None:
    for name in names:
        top = root / name
        files = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        for path in files:
            if "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo"):
                continue
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")


def base_key() -> str:
    """Hash of what the base root filesystem is made from (suite, packages, dpkg options)."""
    spec = json.dumps([DEBIAN_SUITE, BASE_PACKAGES, BASE_DPKG_OPTIONS, os.environ.get("KGOV_DEBIAN_MIRROR", "")])
    return hashlib.sha256(spec.encode()).hexdigest()[:16]


def image_key() -> str:
    """Hash of the image's inputs: the files the Dockerfile copies, the Dockerfile, the base, the runtime settings."""
    digest = hashlib.sha256()
    _hash_paths(digest, REPO, (*IMAGE_INPUTS, "Dockerfile"))
    digest.update(base_key().encode() + json.dumps(RUNTIME.as_json(), sort_keys=True).encode() + image_name().encode())
    digest.update(RECIPE_VERSION.encode())
    return digest.hexdigest()[:16]


def _run(step: str, command: list[str], env: dict[str, str] | None = None) -> None:
    proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise ImageError(f"{step} failed (exit {proc.returncode}): {' '.join(command[:4])} ...\n{tail}")


def base_rootfs() -> Path:
    """The Debian root filesystem the daemonless image and the local Docker base start from (cached).

    Raises:
        ImageError: mmdebstrap is missing or failed (it needs root and the Debian mirror).
    """
    target = image_dir() / f"base-{base_key()}"
    if (target / ".complete").exists():
        return target / "rootfs"
    if shutil.which("mmdebstrap") is None:
        raise ImageError("mmdebstrap is missing: `make e2e-node-deps` installs it")
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    command = ["nice", "-n", "19", "mmdebstrap", "--mode=root", "--variant=minbase", "--quiet"]
    command += [f"--include={','.join(BASE_PACKAGES)}", *(f"--dpkgopt={opt}" for opt in BASE_DPKG_OPTIONS)]
    command += [DEBIAN_SUITE, str(target / "rootfs")]
    if os.environ.get("KGOV_DEBIAN_MIRROR"):
        command.append(os.environ["KGOV_DEBIAN_MIRROR"])
    _run("mmdebstrap", command)
    (target / ".complete").touch()
    return target / "rootfs"


def _install_project(rootfs: Path) -> None:
    """The Dockerfile's build stage in a chroot: a venv at :data:`VENV` with the project, pip removed."""
    source = rootfs / "src"
    source.mkdir()
    for name in IMAGE_INPUTS:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(REPO / name, source / name)
    shutil.copy2(HOST_CA_BUNDLE, rootfs / "tmp" / "host-ca.crt")
    # A clean environment: the machine's certificate variables name paths that inside the chroot are
    # Debian's own bundle, without the machine's CA, and pip's build subprocesses would use them.
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8", "PIP_NO_CACHE_DIR": "1"}
    env |= {name: "/tmp/host-ca.crt" for name in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")}
    env |= {name: os.environ[name] for name in (*PIP_PASSTHROUGH, *PROXY_PASSTHROUGH) if name in os.environ}
    script = (
        f"python -m venv {VENV} && {VENV}/bin/pip install --quiet --disable-pip-version-check /src"
        f" && {VENV}/bin/pip uninstall --quiet --yes pip setuptools wheel"
    )
    _run("pip install in the chroot", ["nice", "-n", "19", "chroot", str(rootfs), "sh", "-ec", script], env)
    shutil.rmtree(source)
    (rootfs / "tmp" / "host-ca.crt").unlink()
    (rootfs / "etc" / "resolv.conf").write_text("")
    for cache in (rootfs / "var" / "lib" / "apt" / "lists", rootfs / "var" / "cache" / "apt"):
        shutil.rmtree(cache, ignore_errors=True)
        cache.mkdir(parents=True)


def _prune(pattern: str, keep: Path, newest: int = 1) -> None:
    """Remove cached archives matching ``pattern`` but the ``newest`` ones (``keep`` always stays)."""
    others = sorted(image_dir().glob(pattern), key=lambda p: p.stat().st_mtime, reverse=True)
    for stale in [p for p in others if p != keep][max(newest - 1, 0) :]:
        stale.unlink(missing_ok=True)


def build_daemonless(out: Path) -> None:
    """The image from the cached base: copy it, install the project in a chroot, write the OCI archive.

    Raises:
        ImageError: a step failed.
    """
    base = base_rootfs()
    with tempfile.TemporaryDirectory(dir=image_dir(), prefix=".rootfs-") as scratch:
        rootfs = Path(scratch) / "rootfs"
        _run("copy of the base", ["cp", "-a", "--reflink=auto", str(base), str(rootfs)])
        _install_project(rootfs)
        oci.write_archive(rootfs, out, image_name(), RUNTIME)


def docker_command() -> list[str] | None:
    """``docker`` (with ``$DOCKER_HOST``) when a daemon answers ``docker info``, else None."""
    if shutil.which("docker") is None:
        return None
    probe = subprocess.run(["docker", "info"], capture_output=True, check=False)
    return ["docker"] if probe.returncode == 0 else None


def build_with_docker(docker: list[str], out: Path) -> None:
    """``docker build`` of the Dockerfile; with a local base when the default one cannot be pulled.

    Raises:
        ImageError: the build or ``docker save`` failed.
    """
    name = image_name().removeprefix("docker.io/library/")
    dockerfile_base = next(
        line.split("=", 1)[1].strip()
        for line in (REPO / "Dockerfile").read_text().splitlines()
        if "PYTHON_IMAGE=" in line
    )
    build_args: list[str] = []
    if subprocess.run([*docker, "pull", dockerfile_base], capture_output=True, check=False).returncode != 0:
        base = base_rootfs()
        local_base = "kgov-base:bookworm"
        with tempfile.TemporaryDirectory() as scratch:
            # The local base gets the machine's CA for pip: it is a test base, never shipped.
            layer = Path(scratch) / "base.tar"
            bundle = "./etc/ssl/certs/ca-certificates.crt"
            tar_command = ["tar", "-C", str(base), "--numeric-owner", f"--exclude={bundle}", "-cf", str(layer), "."]
            _run("tar of the base", tar_command)
            with tarfile.open(layer, "a") as tar:
                tar.add(str(HOST_CA_BUNDLE), bundle)
            _run(
                "docker import of the base",
                [
                    *docker,
                    "import",
                    "-c",
                    "ENV LANG=C.UTF-8",
                    "-c",
                    f"ENV PIP_CERT={HOST_CA_BUNDLE}",
                    str(layer),
                    local_base,
                ],
            )
        build_args = ["--build-arg", f"PYTHON_IMAGE={local_base}"]
    _run("docker build", [*docker, "build", "--network", "host", *build_args, "-t", name, str(REPO)])
    _run("docker save", [*docker, "save", "-o", str(out), name])


def ensure_image(builder: str = "auto") -> Path:
    """The project's image archive for the current sources, built if missing.

    ``builder``: ``auto`` (docker when a daemon answers, else daemonless), ``docker`` or ``daemonless``.

    Raises:
        ImageError: the build failed, or ``docker`` was asked for and no daemon answers.
    """
    out = image_dir() / f"kueue-governor-{image_key()}.tar"
    if out.exists():
        return out
    image_dir().mkdir(parents=True, exist_ok=True)
    docker = docker_command() if builder in ("auto", "docker") else None
    if builder == "docker" and docker is None:
        raise ImageError("no Docker daemon answers `docker info`")
    started = time.monotonic()
    if docker is not None:
        with tempfile.TemporaryDirectory(dir=image_dir(), prefix=".partial-") as scratch:
            build_with_docker(docker, Path(scratch) / "image.tar")
            (Path(scratch) / "image.tar").replace(out)
    else:
        build_daemonless(out)
    _prune("kueue-governor-*.tar", out)
    how = "docker" if docker is not None else "daemonless"
    print(f"built {image_name()} ({how}) in {time.monotonic() - started:.0f}s: {out}", file=sys.stderr)
    return out


def ensure_pause_image() -> Path:
    """The pause image archive (:data:`PAUSE_IMAGE`), compiled from the Kubernetes module's ``pause.c``.

    Raises:
        ImageError: no C compiler, or the build failed.
    """
    source = build.module_dir("k8s.io/kubernetes", build.KUBERNETES_VERSION) / "build" / "pause" / "linux" / "pause.c"
    key = hashlib.sha256(source.read_bytes() + PAUSE_IMAGE.encode()).hexdigest()[:16]
    out = image_dir() / f"pause-{key}.tar"
    if out.exists():
        return out
    if shutil.which("gcc") is None:
        raise ImageError("gcc is missing: `make e2e-node-deps` installs it")
    with tempfile.TemporaryDirectory() as scratch:
        rootfs = Path(scratch) / "rootfs"
        rootfs.mkdir()
        version = f"-DVERSION={PAUSE_IMAGE.rsplit(':', 1)[1]}-local"
        _run(
            "gcc pause.c",
            ["gcc", "-Os", "-Wall", "-Werror", "-static", version, "-o", str(rootfs / "pause"), str(source)],
        )
        _run("strip pause", ["strip", str(rootfs / "pause")])
        oci.write_archive(rootfs, out, PAUSE_IMAGE, PAUSE_RUNTIME)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.image", description=__doc__.splitlines()[0])
    parser.add_argument("--builder", choices=("auto", "docker", "daemonless"), default="auto")
    args = parser.parse_args(argv)
    try:
        paths = {image_name(): str(ensure_image(args.builder)), PAUSE_IMAGE: str(ensure_pause_image())}
    except ImageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(json.dumps(paths, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
