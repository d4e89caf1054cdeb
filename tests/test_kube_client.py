"""Kubeconfigs and servers that cannot be used, for every command that reads a cluster.

One loader (:mod:`webhook.kube.client`) serves ``kgov why``, ``status``, ``diff``, ``topology``
and ``certs inject``: each bad kubeconfig, given by ``--kubeconfig`` or ``$KUBECONFIG``, and a
server that is not a Kubernetes API server (a real HTTP server on 127.0.0.1 answering 404 pages)
must end in one clear line and exit code 2, never a traceback.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from support import PLATFORM

from webhook.cli import main
from webhook.kube.client import ClusterError, check_path, context_namespace

KUBECONFIGS = {
    "garbage": ("a: [b\n", "not YAML (expected ',' or ']', but got '<stream end>' at line 2 column 1)"),
    "empty": ("", "empty (a kubeconfig has clusters, users, contexts)"),
    "list": ("- a\n- b\n", "a YAML list, not a kubeconfig (a mapping with clusters, users, contexts)"),
    "no-context": ("apiVersion: v1\nkind: Config\ncurrent-context: nowhere\n", "Invalid kube-config file"),
    "clusters-not-list": ("clusters: {a: 1}\n", "clusters is not a list"),
}


def _commands(tmp_path: Path) -> dict[str, list[str]]:
    certs = tmp_path / "certs"
    if not (certs / "ca.crt").exists():
        created = CliRunner().invoke(main, ["certs", "create", str(certs), "--dns", "localhost"])
        assert created.exit_code == 0, created.output
    return {
        "why": ["why", "job/train", "-n", "team-a"],
        "status": ["status"],
        "diff": ["diff", str(PLATFORM)],
        "topology": ["topology"],
        "certs inject": ["certs", "inject", str(certs), "--webhook-configuration", "kgov"],
    }


def _run(args: list[str], env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, args, env=env)


def _clean(result: Result, message: str) -> None:
    assert result.exit_code != 0 and result.exit_code in (1, 2), result.output
    assert message in result.output, result.output
    assert ("Traceback" not in result.output and result.exception is None) or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("bad", sorted(KUBECONFIGS))
def test_bad_kubeconfig_is_one_clear_error_for_every_command(tmp_path: Path, bad: str) -> None:
    content, message = KUBECONFIGS[bad]
    path = tmp_path / "kubeconfig"
    path.write_text(content)
    for name, args in _commands(tmp_path).items():
        by_option = _run([*args, "--kubeconfig", str(path)])
        _clean(by_option, f"cannot load kubeconfig {path}: {message}")
        by_env = _run(args, env={"KUBECONFIG": str(path)})
        _clean(by_env, f"cannot load kubeconfig {path}: {message}")
        assert by_option.exit_code == by_env.exit_code, name


def test_missing_kubeconfig_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    for name, args in _commands(tmp_path).items():
        if name in ("diff", "certs inject"):  # click checks the option's file exists
            _clean(_run([*args, "--kubeconfig", str(missing)]), f"File '{missing}' does not exist")
        else:
            _clean(_run([*args, "--kubeconfig", str(missing)]), f"--kubeconfig {missing}: no such file")
        if name != "certs inject":  # falls back to the in-cluster service account, which is absent here
            _clean(_run(args, env={"KUBECONFIG": str(missing)}), f"$KUBECONFIG={missing}: no such file")


def test_kubeconfig_list_skips_missing_files_as_kubectl_does(tmp_path: Path) -> None:
    bad = tmp_path / "list"
    bad.write_text("- a\n")
    result = _run(["status"], env={"KUBECONFIG": f"{tmp_path / 'absent'}:{bad}"})
    _clean(result, f"cannot load kubeconfig {bad}: a YAML list")


class _NotKubernetes(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<html><body>404 File not found</body></html>"
        self.send_response(404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def not_kubernetes(tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig whose server is a plain web server on 127.0.0.1."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotKubernetes)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "web", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "x"}}],
        "contexts": [{"name": "web", "context": {"cluster": "web", "user": "u"}}],
        "current-context": "web",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    try:
        yield path
    finally:
        server.shutdown()
        server.server_close()


def test_a_server_that_is_not_kubernetes_is_said_so(tmp_path: Path, not_kubernetes: Path) -> None:
    port = json.loads(not_kubernetes.read_text())["clusters"][0]["cluster"]["server"]
    for args in _commands(tmp_path).values():
        result = _run([*args, "--kubeconfig", str(not_kubernetes)])
        _clean(result, f"{port} does not answer as a Kubernetes API server (GET /version: HTTP 404")


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/namespaces/x/../y/configmaps/kgov-policy",
        "/apis/batch/v1/namespaces/ns/jobs/finetune?x=1",
        "/apis/batch/v1/namespaces/ns/jobs/finetune#frag",
        "/apis/batch/v1/namespaces/ns/jobs/fine%2Ftune",
        "/apis/batch/v1/namespaces//jobs/x",
    ],
)
def test_no_path_with_a_part_that_is_not_a_name_is_requested(path: str) -> None:
    # The last guard, under every command's own checks: the GET is never sent.
    with pytest.raises(ClusterError, match=r"refusing to GET .* is not a Kubernetes name"):
        check_path(path)


def test_the_paths_the_commands_use_pass() -> None:
    for path in (
        "/version",
        "/api/v1/nodes",
        "/apis/kueue.x-k8s.io/v1beta2/topologies/aws-network",
        "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/team-a/localqueues/q.1/pendingworkloads",
    ):
        check_path(path)


def test_kubeconfig_files_merge_as_kubectl_does(tmp_path: Path, not_kubernetes: Path) -> None:
    # $KUBECONFIG=a:b: the first file's current-context wins, clusters of both files are known.
    first = tmp_path / "first"
    first.write_text(json.dumps({"current-context": "web"}))
    second = tmp_path / "second"
    config = json.loads(not_kubernetes.read_text())
    config["current-context"] = "elsewhere"
    config["contexts"].append({"name": "elsewhere", "context": {"cluster": "nowhere", "user": "u"}})
    second.write_text(json.dumps(config))
    url = config["clusters"][0]["cluster"]["server"]
    result = _run(["status"], env={"KUBECONFIG": f"{first}:{tmp_path / 'absent'}:{second}"})
    _clean(result, f"{url} does not answer as a Kubernetes API server")


def test_the_context_namespace_is_the_default_namespace_as_kubectl_has_it(tmp_path: Path) -> None:
    # Was: `kgov why pod/x --kubeconfig KC` looked in default whatever KC's context said.
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "x"}}],
        "contexts": [
            {"name": "research", "context": {"cluster": "c", "user": "u", "namespace": "hyperpod-ns-research"}},
            {"name": "plain", "context": {"cluster": "c", "user": "u"}},
        ],
        "current-context": "research",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    assert context_namespace(path) == "hyperpod-ns-research"
    assert context_namespace(path, "plain") == "default"
    # $KUBECONFIG=a:b: the first file's current-context wins.
    first = tmp_path / "first"
    first.write_text(json.dumps({"current-context": "plain"}))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("KUBECONFIG", f"{first}:{path}")
        assert context_namespace(None) == "default"
        env.setenv("KUBECONFIG", f"{path}:{first}")
        assert context_namespace(None) == "hyperpod-ns-research"
    config["contexts"][0]["context"]["namespace"] = "Not/A-Name"
    path.write_text(json.dumps(config))
    with pytest.raises(ClusterError, match=r"context 'research': namespace .*"):
        context_namespace(path)
    # kgov why without -n: a bad context namespace is one clear line before anything is read.
    _clean(_run(["why", "job/train", "--kubeconfig", str(path)]), "context 'research': namespace")


def test_a_kubeconfig_that_is_a_device_is_read_as_it_is() -> None:
    # Was: "--kubeconfig /dev/null: no such file", though it exists.
    for args in (["why", "job/train", "-n", "x"], ["why", "job/train"], ["status"]):
        _clean(_run([*args, "--kubeconfig", "/dev/null"]), "cannot load kubeconfig /dev/null: empty")
    _clean(_run(["status"], env={"KUBECONFIG": "/dev/null"}), "cannot load kubeconfig /dev/null: empty")
