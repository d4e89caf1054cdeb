"""A root filesystem directory as a one-layer OCI image archive, with the standard library and GNU tar.

The archive is an OCI image layout (image-spec v1.1 ``image-layout.md``: ``oci-layout``,
``index.json``, ``blobs/sha256/<hex>``) in one tar file, plus a ``docker save`` style
``manifest.json`` naming the same blobs, so ``ctr images import`` and ``docker load`` both take it.
The index's ``io.containerd.image.name`` annotation is the name ``ctr`` gives the image on import.

The layer is the whole directory, written by GNU tar with sorted names, numeric owners and extended
attributes. Modification times are kept: Python's byte-code caches record their source's mtime, and
a cache that no longer matches is compiled again at every start (a read-only root cannot keep it).
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class ImageConfig:
    """The runtime part of an OCI image configuration (image-spec ``config.md``, ``config``).

    ``user`` is ``UID:GID`` (numeric, so ``runAsNonRoot`` can check it); ``env`` entries are
    ``NAME=value``; ``ports`` are ``<port>/tcp``.
    """

    user: str = "65532:65532"
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=list)
    ports: list[str] = field(default_factory=list)
    working_dir: str = "/"

    def as_json(self) -> dict[str, Any]:
        """The ``config`` object of the image configuration."""
        return {
            "User": self.user,
            "Env": self.env,
            "Entrypoint": self.entrypoint,
            "Cmd": self.cmd,
            "ExposedPorts": {port: {} for port in self.ports},
            "WorkingDir": self.working_dir,
        }


def _descriptor(media_type: str, digest: str, size: int) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": digest, "size": size}


def _digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _write_layer(rootfs: Path, target: Path) -> str:
    """Tar ``rootfs`` into ``target`` (uncompressed); return the layer's digest (= its diff ID)."""
    tar = subprocess.Popen(
        ["tar", "-C", str(rootfs), "--sort=name", "--numeric-owner", "--xattrs", "-cf", "-", "."],
        stdout=subprocess.PIPE,
    )
    assert tar.stdout is not None
    digest = hashlib.sha256()
    with target.open("wb") as out:
        while chunk := tar.stdout.read(_CHUNK):
            digest.update(chunk)
            out.write(chunk)
    if tar.wait() != 0:
        raise RuntimeError(f"tar of {rootfs} failed (exit {tar.returncode})")
    return "sha256:" + digest.hexdigest()


def _add_bytes(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


def write_archive(rootfs: Path, out: Path, name: str, config: ImageConfig, architecture: str = "amd64") -> str:
    """Write ``rootfs`` as a one-layer image named ``name`` to the tar file ``out``.

    ``name`` is a full reference as containerd stores it (``docker.io/library/kueue-governor:0.1.0``,
    ``registry.k8s.io/pause:3.10.2``). The archive is written next to ``out`` and renamed into
    place, so an interrupted run leaves no partial file under that name.

    Returns:
        The manifest digest (``sha256:<hex>``): what ``ctr images ls`` shows as the image's target.

    Raises:
        RuntimeError: tar failed on ``rootfs``.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".partial-") as scratch:
        layer_path = Path(scratch) / "layer.tar"
        layer_digest = _write_layer(rootfs, layer_path)
        layer = _descriptor(LAYER_MEDIA_TYPE, layer_digest, layer_path.stat().st_size)
        image_config = {
            "architecture": architecture,
            "os": "linux",
            "created": "1970-01-01T00:00:00Z",
            "config": config.as_json(),
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        }
        config_bytes = json.dumps(image_config, sort_keys=True).encode()
        config_digest = _digest_of(config_bytes)
        manifest = {
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": _descriptor(CONFIG_MEDIA_TYPE, config_digest, len(config_bytes)),
            "layers": [layer],
        }
        manifest_bytes = json.dumps(manifest, sort_keys=True).encode()
        manifest_digest = _digest_of(manifest_bytes)
        tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else "latest"
        index = {
            "schemaVersion": 2,
            "mediaType": INDEX_MEDIA_TYPE,
            "manifests": [
                _descriptor(MANIFEST_MEDIA_TYPE, manifest_digest, len(manifest_bytes))
                | {
                    "platform": {"architecture": architecture, "os": "linux"},
                    "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag},
                }
            ],
        }
        docker_manifest = [
            {
                "Config": f"blobs/sha256/{config_digest[7:]}",
                "RepoTags": [name.removeprefix("docker.io/library/")],
                "Layers": [f"blobs/sha256/{layer_digest[7:]}"],
            }
        ]
        partial = Path(scratch) / "image.tar"
        with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as archive:
            _add_bytes(archive, "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
            _add_bytes(archive, "index.json", json.dumps(index, sort_keys=True).encode())
            _add_bytes(archive, "manifest.json", json.dumps(docker_manifest).encode())
            _add_bytes(archive, f"blobs/sha256/{config_digest[7:]}", config_bytes)
            _add_bytes(archive, f"blobs/sha256/{manifest_digest[7:]}", manifest_bytes)
            archive.add(str(layer_path), f"blobs/sha256/{layer_digest[7:]}")
        partial.replace(out)
    return manifest_digest


def read_archive(archive: Path) -> tuple[str, str, dict[str, Any]]:
    """The (name, manifest digest, image configuration) of an archive :func:`write_archive` wrote.

    Raises:
        ValueError: the file is not a one-image OCI layout archive.
    """
    with tarfile.open(archive) as tar:

        def member(path: str) -> bytes:
            extracted = tar.extractfile(path)
            if extracted is None:
                raise ValueError(f"{archive}: {path} is not a file")
            return extracted.read()

        try:
            index = json.loads(member("index.json"))
            (entry,) = index["manifests"]
            manifest = json.loads(member(f"blobs/sha256/{entry['digest'][7:]}"))
            config = json.loads(member(f"blobs/sha256/{manifest['config']['digest'][7:]}"))
        except (KeyError, ValueError) as error:
            raise ValueError(f"{archive} is not a one-image OCI layout: {error}") from error
    return entry["annotations"]["io.containerd.image.name"], entry["digest"], config
