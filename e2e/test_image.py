"""The image archive writer and the real node's configurations, without a cluster.

* :func:`e2e.oci.write_archive` writes an OCI image layout whose digests are those of the blobs it
  holds, whose layer holds the directory's files with their owners and modes, and whose config
  carries the runtime settings; :func:`e2e.oci.read_archive` reads back name, digest and config;
* the image's hash follows its inputs (a change in ``webhook/`` gives another archive name);
* the real node's kubelet, containerd and kube-proxy settings that this machine kind needs are there.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from pathlib import Path

import pytest

from e2e import image, oci
from e2e.devcluster import nodeconfig
from e2e.devcluster.state import Paths
from e2e.manifests import INSTANCE_TYPE_LABEL, TopologyShape

pytestmark = pytest.mark.e2e


def test_archive_is_an_oci_layout_with_matching_digests(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    (rootfs / "bin" / "tool").write_text("#!/bin/sh\necho hi\n")
    os.chmod(rootfs / "bin" / "tool", 0o755)
    out = tmp_path / "image.tar"
    config = oci.ImageConfig(user="65532:65532", entrypoint=["/bin/tool"], cmd=["x"], env=["A=1"], ports=["8443/tcp"])
    digest = oci.write_archive(rootfs, out, "docker.io/library/demo:1.2", config)

    with tarfile.open(out) as archive:
        names = archive.getnames()
        blobs = {name: archive.extractfile(name).read() for name in names if name.startswith("blobs/")}  # type: ignore[union-attr]
        index = json.loads(archive.extractfile("index.json").read())  # type: ignore[union-attr]
        docker = json.loads(archive.extractfile("manifest.json").read())  # type: ignore[union-attr]
    assert {"oci-layout", "index.json", "manifest.json"} <= set(names)
    for name, data in blobs.items():
        assert name == "blobs/sha256/" + hashlib.sha256(data).hexdigest()
    (entry,) = index["manifests"]
    assert entry["digest"] == digest
    assert entry["annotations"]["io.containerd.image.name"] == "docker.io/library/demo:1.2"
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == "1.2"
    assert docker[0]["RepoTags"] == ["demo:1.2"]
    manifest = json.loads(blobs[f"blobs/sha256/{digest[7:]}"])
    (layer,) = manifest["layers"]
    assert layer["size"] == len(blobs[f"blobs/sha256/{layer['digest'][7:]}"])
    written = json.loads(blobs[f"blobs/sha256/{manifest['config']['digest'][7:]}"])
    assert written["config"]["User"] == "65532:65532"
    assert written["config"]["Entrypoint"] == ["/bin/tool"]
    assert written["config"]["ExposedPorts"] == {"8443/tcp": {}}
    assert written["rootfs"]["diff_ids"] == [layer["digest"]]  # uncompressed: the diff ID is the blob's digest

    layer_path = tmp_path / "layer.tar"
    layer_path.write_bytes(blobs[f"blobs/sha256/{layer['digest'][7:]}"])
    with tarfile.open(layer_path) as files:
        tool = files.getmember("./bin/tool")
        assert tool.mode & 0o777 == 0o755
        assert (tool.uid, tool.gid) == (os.getuid(), os.getgid())
        assert files.extractfile(tool).read() == b"#!/bin/sh\necho hi\n"  # type: ignore[union-attr]

    assert oci.read_archive(out) == ("docker.io/library/demo:1.2", digest, written)


def test_read_archive_refuses_another_tar(tmp_path: Path) -> None:
    other = tmp_path / "other.tar"
    with tarfile.open(other, "w") as archive:
        archive.add(__file__, "index.json")
    with pytest.raises(ValueError, match="not a one-image OCI layout"):
        oci.read_archive(other)


def test_image_key_follows_the_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    (repo / "webhook").mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "Dockerfile"):
        (repo / name).write_text(name)
    (repo / "webhook" / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(image, "REPO", repo)
    first = image.image_key()
    (repo / "webhook" / "__pycache__").mkdir()
    (repo / "webhook" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"cache")
    assert image.image_key() == first  # byte-code caches are no input
    (repo / "webhook" / "a.py").write_text("x = 2\n")
    assert image.image_key() != first
    assert image.image_name() == "docker.io/library/kueue-governor:0.1.0"  # the chart's repository and appVersion


def test_real_node_settings_this_machine_needs(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    node = nodeconfig.NodePaths(paths)
    containerd = nodeconfig.containerd_config(node)
    assert "restrict_oom_score_adj = true" in containerd  # no CAP_SYS_RESOURCE
    assert f'sandbox_image = "{image.PAUSE_IMAGE}"' in containerd
    assert f'address = "{node.socket}"' in containerd
    kubelet = nodeconfig.kubelet_configuration(node, paths, 12345)
    assert kubelet["failCgroupV1"] is False and kubelet["cgroupDriver"] == "cgroupfs"
    assert kubelet["registerWithTaints"] == [nodeconfig.REAL_NODE_TAINT]
    assert kubelet["resolvConf"] == ""
    assert kubelet["healthzPort"] == 12345
    proxy = nodeconfig.kube_proxy_configuration(node, 1, 2)
    assert proxy["mode"] == "iptables" and proxy["conntrack"]["maxPerCore"] == 0
    assert proxy["nodePortAddresses"] == ["10.244.0.1/32"]
    cni = nodeconfig.cni_config(node)
    assert cni["plugins"][0]["ipMasq"] is False
    labels = nodeconfig.node_labels(TopologyShape())
    assert labels[nodeconfig.REAL_NODE_LABEL] == "true"
    assert labels[INSTANCE_TYPE_LABEL] == TopologyShape().instance_type
    assert "kubernetes.io/hostname" not in labels  # the kubelet sets its own
