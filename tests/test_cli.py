"""``kgov review`` / ``mutate`` / ``policy`` / ``schema`` as a user runs them: outputs and exit codes."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from conftest import Pki
from support import PLATFORM, REPO, job, review_body

from webhook.cli import main

EXAMPLES = REPO / "examples"


def invoke(*args: str, stdin: str | None = None) -> object:
    return CliRunner().invoke(main, list(args), input=stdin, catch_exceptions=False)


def test_review_answers_like_the_server() -> None:
    body = review_body(job(), "hyperpod-ns-research")
    result = invoke("review", "--platform", str(PLATFORM), stdin=json.dumps(body))
    assert result.exit_code == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == body["request"]["uid"]
    patch = json.loads(base64.b64decode(answer["response"]["patch"]))
    assert patch[0] == {
        "op": "add",
        "path": "/metadata/labels",
        "value": {"kueue.x-k8s.io/queue-name": "hyperpod-ns-research-localqueue"},
    }


@pytest.mark.parametrize(
    ("stdin", "message"),
    [
        ("not json", "malformed AdmissionReview: body is not valid JSON"),
        ('{"apiVersion": NaN}', "NaN is not a JSON value"),
        ("[]", "body must be a JSON object (an AdmissionReview), got array"),
        ('{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "request is missing"),
        (
            '{"apiVersion": "admission.k8s.io/v2", "kind": "AdmissionReview", "request": {}}',
            "apiVersion must be one of admission.k8s.io/v1, admission.k8s.io/v1beta1, got 'admission.k8s.io/v2'",
        ),
        (
            '{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 5}}',
            "request.uid must be a string, got number",
        ),
    ],
)
def test_review_refuses_malformed_input_precisely(stdin: str, message: str) -> None:
    result = invoke("review", "--platform", str(PLATFORM), stdin=stdin)
    assert result.exit_code == 1
    assert message in result.stderr
    assert result.stdout == ""


def test_review_with_namespace_dump_resolves_label_selected_teams(tmp_path: Path) -> None:
    platform = yaml.safe_load(PLATFORM.read_text())
    platform["teams"][0]["namespaceSelector"] = {"matchLabels": {"org/team": "research"}}
    platform["teams"][0]["namespaces"] = []
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(platform))
    dump = tmp_path / "ns.json"
    dump.write_text(
        json.dumps({"kind": "List", "items": [{"metadata": {"name": "lab-7", "labels": {"org/team": "research"}}}]})
    )
    body = json.dumps(review_body(job(), "lab-7"))
    with_dump = json.loads(invoke("review", "--platform", str(path), "--namespaces", str(dump), stdin=body).stdout)
    without = json.loads(invoke("review", "--platform", str(path), stdin=body).stdout)
    assert "patch" in with_dump["response"]
    assert "patch" not in without["response"]


def test_mutate_bundled_example_with_nodes() -> None:
    result = invoke(
        "mutate",
        "--platform",
        str(PLATFORM),
        "-n",
        "hyperpod-ns-research",
        "-f",
        str(EXAMPLES / "pytorchjob.yaml"),
        "--nodes",
        str(EXAMPLES / "nodes.json"),
        "--explain",
    )
    assert result.exit_code == 0, result.stderr
    out = yaml.safe_load(result.stdout)
    # 3 workers of 8 GPUs and their master: one rack (layer 3) of 4 p5 hosts holds them all, the
    # level the workers alone get, so the master is grouped with them.
    for role in ("Master", "Worker"):
        assert out["spec"]["pytorchReplicaSpecs"][role]["template"]["metadata"]["annotations"] == {
            "kueue.x-k8s.io/podset-required-topology": "topology.k8s.aws/network-node-layer-3",
            "kueue.x-k8s.io/podset-group-name": "master-worker",
        }
    assert out["spec"]["runPolicy"] == {"suspend": True}
    assert "# document 1: PyTorchJob llama-finetune" in result.stderr
    assert "topology: add spec/pytorchReplicaSpecs/Worker/template/metadata" in result.stderr
    # The reasoning: pods, per-pod request, the largest domain of each level, the choice.
    assert (
        "#   topology auto: 'master' (1 pod of {nvidia.com/gpu: 8, vpc.amazonaws.com/efa: 32}) + 'worker' "
        "(3 pods of {nvidia.com/gpu: 8, vpc.amazonaws.com/efa: 32}): 4 pods; the largest domain holds "
        "topology.k8s.aws/network-node-layer-1 16, topology.k8s.aws/network-node-layer-2 8, "
        "topology.k8s.aws/network-node-layer-3 4, kubernetes.io/hostname 1; all eligible nodes 16 → required "
        "topology.k8s.aws/network-node-layer-3, the narrowest level one domain of which holds them; grouped as "
        "'master-worker': together they need no broader level than 'worker' alone\n"
    ) in result.stderr


def test_mutate_denied_example_exits_1_with_both_reasons() -> None:
    result = invoke(
        "mutate",
        "--platform",
        str(PLATFORM),
        "-n",
        "hyperpod-ns-research",
        "-f",
        str(EXAMPLES / "jobset-stolen-queue.yaml"),
    )
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith("kgov mutate: document 1 denied, 2 reasons:\n")
    assert (
        "\n  queue: LocalQueue 'hyperpod-ns-inference-localqueue' "
        "(metadata.labels.kueue.x-k8s.io/queue-name) is not allowed for team 'research'; "
        "allowed: hyperpod-ns-research-localqueue"
    ) in result.stderr
    assert "kueuePriority: WorkloadPriorityClass 'inference-priority'" in result.stderr
    assert "allowed: training-priority, experimentation-priority" in result.stderr


def test_mutate_patch_prints_one_patch_per_document(tmp_path: Path) -> None:
    manifest = tmp_path / "two.yaml"
    manifest.write_text(
        yaml.safe_dump_all([job(), {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}])
    )
    result = invoke("mutate", "--platform", str(PLATFORM), "-n", "hyperpod-ns-research", "-f", str(manifest), "--patch")
    patches = json.loads(result.stdout)
    assert len(patches) == 2 and patches[1] == []
    assert patches[0][0]["path"] == "/metadata/labels"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("a: [1, 2", "not valid YAML"),
        ("- just\n- a list\n", "document 1 is not a Kubernetes object (needs apiVersion and kind)"),
        ("kind: Job\nmetadata: {name: x}\n", "document 1 is not a Kubernetes object"),
    ],
)
def test_mutate_rejects_unusable_manifests(tmp_path: Path, content: str, message: str) -> None:
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(content)
    result = invoke("mutate", "--platform", str(PLATFORM), "-n", "ns", "-f", str(manifest))
    assert result.exit_code == 2
    assert message in result.stderr


@pytest.mark.parametrize(
    ("platform", "message"),
    [
        ("teams: [", "not valid YAML"),
        ("teams:\n  - name: A_team\n", "teams[0].name: 'A_team' is not a DNS-1123 label"),
        ("teams:\n  - name: a\n    quota: []\n", "teams[0].quota: Extra inputs are not permitted"),
        (
            "teams:\n  - name: a\n    quotas: [{flavor: p5, resources: {cpu: {nominalQuota: 1}}}]\n",
            "teams[0].quotas[0].flavor: unknown flavor 'p5' (known: [])",
        ),
        (
            "flavors: [{name: f, nodeLabels: {a: b}}]\n"
            "teams:\n  - name: a\n    quotas: [{flavor: f, resources: {cpu: {nominalQuota: 4, borrowingLimit: 2}}}]\n",
            "teams[0].quotas[0].resources.cpu.borrowingLimit: borrowingLimit needs the team to be in a cohort",
        ),
        (
            "topologies: [{name: t, levels: [kubernetes.io/hostname, rack]}]\n",
            "topologies[0].levels: 'kubernetes.io/hostname' may only be the last (narrowest) level",
        ),
        (
            "flavors: [{name: f, topologyName: t}]\n",
            "flavors[0]: a flavor with a topologyName needs at least one nodeLabel",
        ),
        ("kind: Platfrom\n", "kind: Input should be 'Platform'"),
    ],
)
def test_bad_platform_file_fails_with_its_path(tmp_path: Path, platform: str, message: str) -> None:
    path = tmp_path / "platform.yaml"
    path.write_text(platform)
    result = invoke("policy", "--platform", str(path))
    assert result.exit_code == 2
    assert message in result.stderr, result.stderr


def test_missing_platform_file_is_a_clear_error(tmp_path: Path) -> None:
    result = invoke("policy", "--platform", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 2
    assert "nope.yaml: invalid platform file" in result.stderr and "cannot read" in result.stderr


def test_non_utf8_platform_or_dump_is_a_clear_error(tmp_path: Path) -> None:
    """Regression: a non-UTF-8 file raised UnicodeDecodeError instead of an input error."""
    path = tmp_path / "latin1.yaml"
    path.write_bytes("teams: [{name: \u00e9quipe}]\n".encode("latin-1"))
    result = invoke("policy", "--platform", str(path))
    assert result.exit_code == 2
    assert "latin1.yaml: invalid platform file" in result.stderr and "not UTF-8 text" in result.stderr
    result = invoke("review", "--platform", str(PLATFORM), "--namespaces", str(path), stdin="{}")
    assert result.exit_code == 2 and "latin1.yaml: not UTF-8 text" in result.stderr


def test_schema_is_a_json_schema_of_the_platform_file() -> None:
    schema = json.loads(invoke("schema").stdout)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) >= {"teams", "flavors", "topologies", "priorities", "cohorts", "naming"}


# -- regressions from trying kgov as a new user --------------------------------------------------
def _mutate(tmp_path: Path, content: str | bytes, *extra: str) -> Any:
    manifest = tmp_path / "m.yaml"
    manifest.write_bytes(content if isinstance(content, bytes) else content.encode())
    return invoke("mutate", "--platform", str(PLATFORM), "-n", "hyperpod-ns-research", "-f", str(manifest), *extra)


def test_mutate_non_utf8_manifest_is_an_input_error(tmp_path: Path) -> None:
    result = _mutate(tmp_path, "metadata: {name: caf\u00e9}\n".encode("latin-1"))
    assert result.exit_code == 2 and "m.yaml: not UTF-8 text" in result.stderr


@pytest.mark.parametrize("metadata", ["[a, b]", "x", "null"])
def test_mutate_metadata_of_the_wrong_type(tmp_path: Path, metadata: str) -> None:
    result = _mutate(tmp_path, f"apiVersion: batch/v1\nkind: Job\nmetadata: {metadata}\nspec: {{}}\n")
    if metadata == "null":
        assert result.exit_code == 0, result.stderr  # no metadata: the labels map is added whole
        assert yaml.safe_load(result.stdout)["metadata"]["labels"]
    else:  # refused like the server's 400, and the other documents are still reviewed
        assert result.exit_code == 1
        assert "document 1 refused: metadata must be an object" in result.stderr


def test_mutate_yaml_aliases_do_not_share_mutations(tmp_path: Path) -> None:
    manifest = """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: alias}
spec:
  pytorchReplicaSpecs:
    Master: {replicas: 1, template: &t {spec: {containers: [{name: c, image: x,
      resources: {limits: {nvidia.com/gpu: 8}}}]}}}
    Worker: {replicas: 8, template: *t}
"""
    result = _mutate(tmp_path, manifest, "--nodes", str(EXAMPLES / "nodes.json"))
    assert "&id" not in result.stdout and "*id" not in result.stdout
    specs = yaml.safe_load(result.stdout)["spec"]["pytorchReplicaSpecs"]
    master = specs["Master"]["template"]["metadata"]["annotations"]
    worker = specs["Worker"]["template"]["metadata"]["annotations"]
    assert master == {"kueue.x-k8s.io/podset-required-topology": "kubernetes.io/hostname"}
    # 8 workers exceed a rack (4 hosts); research caps required placement at the rack level.
    assert worker == {"kueue.x-k8s.io/podset-preferred-topology": "topology.k8s.aws/network-node-layer-3"}


def test_mutate_reviews_the_items_of_a_list(tmp_path: Path) -> None:
    listing = {"apiVersion": "v1", "kind": "List", "items": [job(), {"apiVersion": "v1", "kind": "ConfigMap"}]}
    result = _mutate(tmp_path, yaml.safe_dump(listing))
    assert result.exit_code == 0, result.stderr
    out = yaml.safe_load(result.stdout)
    assert out["kind"] == "List"
    assert out["items"][0]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "hyperpod-ns-research-localqueue"
    assert out["items"][1] == {"apiVersion": "v1", "kind": "ConfigMap"}


@pytest.mark.parametrize("content", ["", "# nothing\n", "---\n---\n"])
def test_mutate_empty_file_is_an_input_error(tmp_path: Path, content: str) -> None:
    # As `kubectl apply -f` refuses "no objects passed": nothing reviewed is not a success.
    result = _mutate(tmp_path, content)
    assert result.exit_code == 2 and result.stdout == ""
    assert "no object to review (the input is empty or holds only comments)" in result.stderr


def test_mutate_patch_keeps_document_positions_for_denied_ones(tmp_path: Path) -> None:
    stolen = job(metadata={"name": "s", "labels": {"kueue.x-k8s.io/queue-name": "other"}})
    result = _mutate(tmp_path, yaml.safe_dump_all([stolen, job()]), "--patch")
    assert result.exit_code == 1
    patches = json.loads(result.stdout)
    assert patches[0] is None and patches[1][0]["path"] == "/metadata/labels"


@pytest.mark.parametrize("namespace", ["", "Bad NS!"])
def test_mutate_refuses_a_namespace_that_cannot_exist(tmp_path: Path, namespace: str) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(yaml.safe_dump(job()))
    result = invoke("mutate", "--platform", str(PLATFORM), "-n", namespace, "-f", str(manifest))
    assert result.exit_code == 2 and "is not a DNS-1123 label" in result.stderr


def test_policy_can_exclude_the_webhooks_own_namespace() -> None:
    result = invoke("policy", "--platform", str(PLATFORM), "--exclude-namespace", "kueue-governor-system")
    assert json.loads(result.stdout)["excludedNamespaces"][-1] == "kueue-governor-system"


def test_serve_refuses_label_selected_teams_without_a_label_source(tmp_path: Path) -> None:
    platform = yaml.safe_load(PLATFORM.read_text())
    platform["teams"][0]["namespaceSelector"] = {"matchLabels": {"org/team": "research"}}
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(platform))
    for name in ("tls.crt", "tls.key"):
        (tmp_path / name).write_text("unused: the check comes first")
    result = invoke(
        "serve",
        "--platform",
        str(path),
        "--tls-cert-file",
        str(tmp_path / "tls.crt"),
        "--tls-private-key-file",
        str(tmp_path / "tls.key"),
    )
    assert result.exit_code == 2
    assert "give --watch-cluster (or --namespaces FILE)" in result.stderr


def test_serve_names_a_missing_certificate_file(tmp_path: Path) -> None:
    result = invoke(
        "serve",
        "--platform",
        str(PLATFORM),
        "--tls-cert-file",
        str(tmp_path / "no.crt"),
        "--tls-private-key-file",
        str(tmp_path / "no.key"),
    )
    assert result.exit_code == 2 and f"--tls-cert-file {tmp_path / 'no.crt'}: no such file" in result.stderr


def test_review_with_the_generated_policy_configmap_answers_like_the_platform_file() -> None:
    configmap = REPO / "kueue-config" / "generated" / "policy-configmap.yaml"
    body = json.dumps(review_body(job(), "hyperpod-ns-research"))
    from_configmap = json.loads(invoke("review", "--policy", str(configmap), stdin=body).stdout)
    from_platform = json.loads(invoke("review", "--platform", str(PLATFORM), stdin=body).stdout)
    assert from_configmap["response"]["patch"] == from_platform["response"]["patch"]


def test_invalid_policy_file_is_called_a_policy_file(tmp_path: Path) -> None:
    path = tmp_path / "policy.json"
    path.write_text('{"kind": "PolicySet", "teams": [{"team": 1}]}')
    result = invoke("review", "--policy", str(path), stdin="{}")
    assert result.exit_code == 2
    assert (
        f"{path}: invalid policy file" in result.stderr
        and "teams[0].team: Input should be a valid string" in result.stderr
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {x: .nan}\n", "JSON cannot carry (NaN) at spec.x"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {x: !!binary aGk=}\n", "a value JSON cannot carry"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {x: !!set {a}}\n", "a value JSON cannot carry"),
        ("a: " + "[" * 20000 + "]" * 20000 + "\n", "nested more than 200 levels deep (at line 1 column 203)"),
        ("a: &a [*a]\n", "holds a recursive YAML alias (an anchor that refers to itself"),
        ("a: &a {b: *a}\n", "holds a recursive YAML alias"),
    ],
)
def test_mutate_refuses_yaml_that_json_cannot_carry(tmp_path: Path, content: str, message: str) -> None:
    result = _mutate(tmp_path, content)
    assert result.exit_code == 2 and message in result.stderr, result.stderr


def test_mutate_keeps_yaml_timestamps_as_strings_like_kubernetes(tmp_path: Path) -> None:
    obj = job()
    obj["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "DAY", "value": "2024-01-01"}]
    text = yaml.safe_dump(obj).replace("'2024-01-01'", "2024-01-01")
    result = _mutate(tmp_path, text)
    assert result.exit_code == 0, result.stderr
    env = yaml.safe_load(result.stdout)["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env == [{"name": "DAY", "value": "2024-01-01"}]


def test_mutate_refuses_alias_bombs_quickly(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    result = _mutate(tmp_path, "\n".join(lines) + "\n")
    assert result.exit_code == 2 and "expands to more than 8 MiB of JSON" in result.stderr


def test_mutate_flattens_nested_and_typed_lists(tmp_path: Path) -> None:
    inner = {"apiVersion": "batch/v1", "kind": "JobList", "items": [job()]}
    outer = {"apiVersion": "v1", "kind": "List", "items": [inner]}
    result = _mutate(tmp_path, yaml.safe_dump(outer))
    out = yaml.safe_load(result.stdout)
    assert out["items"][0]["items"][0]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == (
        "hyperpod-ns-research-localqueue"
    )


def _serve_on_port_1(*options: str) -> Any:
    """``kgov serve`` of the bundled platform on 127.0.0.1:1 (refused before it listens)."""
    return invoke("serve", "--platform", str(PLATFORM), "--host", "127.0.0.1", "--port", "1", *options)


def test_serve_with_certificate_and_key_swapped_says_so(pki: Pki) -> None:
    result = _serve_on_port_1("--tls-cert-file", str(pki.key_file), "--tls-private-key-file", str(pki.cert_file))
    assert result.exit_code == 2
    assert "cannot load the serving certificate pair" in result.stderr
    # In words, not OpenSSL's "PEM lib": the file given as the certificate holds none.
    assert f"{pki.key_file} holds no PEM certificate" in result.stderr


def test_import_hyperpod_names_an_unreadable_quota_file(tmp_path: Path) -> None:
    """Regression: a non-UTF-8 quota file raised UnicodeDecodeError (a traceback)."""
    quota = tmp_path / "quota.json"
    quota.write_bytes(b'{"Name": "\xe9quipe"}')
    result = invoke("import-hyperpod", "--quota", str(quota), "--instance-resources", "ml.p5.48xlarge=nvidia.com/gpu=8")
    assert result.exit_code == 2
    assert f"{quota}: not UTF-8 text" in result.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("apiVersion: v1\nkind: List\nitems: [5]\n", "document 1 item 1 is not a Kubernetes object"),
        ("apiVersion: v1\nkind: List\nitems: [null]\n", "document 1 item 1 is not a Kubernetes object"),
        (
            "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: List, items: [{kind: Job}, x]}\n",
            "document 1 item 1 item 1 is not a Kubernetes object (needs apiVersion and kind): "
            "items[0].items[0] is object",
        ),
        (
            "apiVersion: v1\nkind: List\nitems: [x]\n",
            'document 1 item 1 is not a Kubernetes object (needs apiVersion and kind): items[0] is string "x"',
        ),
        ("a: " + "9" * 5000 + "\n", "an integer of 5000 digits (at line 1 column 4) is too long to be a Kubernetes"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {x: !!binary aGk=}\n", "YAML binary data or a set"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {x: .inf}\n", "JSON cannot carry (infinity) at spec.x"),
    ],
)
def test_mutate_refuses_other_unusable_documents_clearly(tmp_path: Path, content: str, message: str) -> None:
    result = _mutate(tmp_path, content)
    assert result.exit_code == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_mutate_reads_base_60_like_values_as_strings_as_kubernetes_does(tmp_path: Path) -> None:
    obj = job()
    obj["spec"]["template"]["spec"]["containers"][0]["args"] = ["1:30:00"]
    result = _mutate(tmp_path, yaml.safe_dump(obj).replace("'1:30:00'", "1:30:00"))
    assert yaml.safe_load(result.stdout)["spec"]["template"]["spec"]["containers"][0]["args"] == ["1:30:00"]


def test_review_refuses_absurdly_long_numbers_without_python_internals() -> None:
    result = invoke("review", "--platform", str(PLATFORM), stdin='{"n": ' + "9" * 5000 + "}")
    assert result.exit_code == 1
    assert "a number of 5000 digits is no Kubernetes value" in result.stderr
    assert "set_int_max_str_digits" not in result.stderr


def test_serve_with_a_kubeconfig_that_is_not_one_says_so(tmp_path: Path, pki: Pki) -> None:
    (tmp_path / "kubeconfig").write_text("just some text\n")
    result = _serve_on_port_1(
        "--watch-cluster",
        "--kubeconfig",
        str(tmp_path / "kubeconfig"),
        "--tls-cert-file",
        str(pki.cert_file),
        "--tls-private-key-file",
        str(pki.key_file),
    )
    assert result.exit_code == 2
    assert "cannot reach the API server for --watch-cluster" in result.stderr


BAD_NODES = {
    "[]": "expected `kubectl get nodes -o json` output (a NodeList or List) or one Node, got an empty array",
    "kind: ConfigMap\nmetadata: {name: c}\n": (
        "expected `kubectl get nodes -o json` output (a NodeList or List) or one Node, got kind 'ConfigMap'"
    ),
    "kind: NodeList\nitems:\n- metadata: {name: gpu-1}\n  status: {allocatable: {nvidia.com/gpu: abc}}\n": (
        "items[0] (node 'gpu-1'): status.allocatable.nvidia.com/gpu: 'abc' is not a Kubernetes quantity "
        "(e.g. 8, 500m, 64Gi)"
    ),
    # Regression: a node of 1e400 CPUs was read as such; Kubernetes holds at most 2^63-1.
    "kind: NodeList\nitems:\n- metadata: {name: cpu-1}\n  status: {allocatable: {cpu: 1e400}}\n": (
        "items[0] (node 'cpu-1'): status.allocatable.cpu: '1e400' is out of the range of a Kubernetes quantity "
        "(at most 2^63-1 = 9223372036854775807 in magnitude, in base units)"
    ),
}


@pytest.mark.parametrize("content", list(BAD_NODES))
@pytest.mark.parametrize("command", ["mutate", "generate", "topology", "serve"])
def test_every_command_refuses_a_node_file_that_is_no_node_inventory(
    tmp_path: Path, content: str, command: str
) -> None:
    """Defect: ``kgov mutate --nodes`` (and ``serve``) read ``[]`` or a ConfigMap as "no node
    inventory", and an allocatable of "abc" as 0 GPUs, then told the user their workload could
    never be admitted. Every command now refuses the file as a usage error naming it."""
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(content)
    manifest = tmp_path / "m.yaml"
    manifest.write_text(yaml.safe_dump(job()))
    args = {
        "mutate": ["mutate", "--platform", str(PLATFORM), "-n", "hyperpod-ns-research", "-f", str(manifest)],
        "generate": ["generate", str(PLATFORM), "--out", str(tmp_path / "out")],
        "topology": ["topology"],
        "serve": [
            "serve",
            "--platform",
            str(PLATFORM),
            "--host",
            "127.0.0.1",
            "--port",
            "1",
            "--tls-cert-file",
            str(manifest),
            "--tls-private-key-file",
            str(manifest),
        ],
    }[command]
    result = invoke(*args, "--nodes", str(nodes))
    assert result.exit_code == 2 and result.stdout == ""
    assert f"{nodes}: {BAD_NODES[content]}" in " ".join(result.stderr.split())


def test_mutate_takes_an_empty_node_list(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.json"
    nodes.write_text('{"apiVersion": "v1", "kind": "NodeList", "items": []}')
    result = _mutate(tmp_path, yaml.safe_dump(job()), "--nodes", str(nodes))
    assert result.exit_code == 0, result.stderr


ADMISSION = REPO / "tests" / "data" / "admission"


def test_mutate_answers_an_admission_review_as_the_server_does() -> None:
    """An AdmissionReview given to ``kgov mutate`` (an UPDATE with its oldObject) was taken for a
    manifest of an unknown kind: echoed unchanged with exit 0. It is answered as ``kgov review``
    answers it, with the same decision, and the result is its object patched."""
    recorded = ADMISSION / "v1-job-update-queue-label.json"
    served = json.loads(invoke("review", "--platform", str(PLATFORM), stdin=recorded.read_text()).stdout)
    result = invoke("mutate", "--platform", str(PLATFORM), "-n", "hyperpod-ns-research", "-f", str(recorded))
    assert result.exit_code == 1
    assert result.stdout == ""
    message = served["response"]["status"]["message"].removeprefix("kueue-governor: ")
    assert result.stderr == f"kgov mutate: document 1 (UPDATE) denied: {message}\n"


def test_mutate_prints_an_admitted_review_object_patched_and_names_another_namespace(tmp_path: Path) -> None:
    body = json.loads((ADMISSION / "v1-job-update-queue-label.json").read_text())
    request = body["request"]
    request["object"]["metadata"]["labels"] = {"kueue.x-k8s.io/priority-class": "training-priority"}
    path = tmp_path / "review.json"
    path.write_text(json.dumps(body))
    result = invoke("mutate", "--platform", str(PLATFORM), "-n", "default", "-f", str(path), "--explain")
    assert result.exit_code == 0, result.stderr
    assert yaml.safe_load(result.stdout)["metadata"]["labels"] == {
        "kueue.x-k8s.io/priority-class": "training-priority",
        "kueue.x-k8s.io/queue-name": "hyperpod-ns-research-localqueue",  # put back, as the server does
    }
    assert result.stderr.startswith(
        "kgov mutate: document 1 is an AdmissionReview of namespace 'hyperpod-ns-research'; answered in it, not in "
        "'default' (-n)\n# document 1 (UPDATE): Job "
    )
    assert (
        "kgov mutate: warning: document 1 (UPDATE): queue: this update removes "
        "metadata.labels.kueue.x-k8s.io/queue-name"
    ) in result.stderr


def test_mutate_refuses_a_malformed_admission_review(tmp_path: Path) -> None:
    path = tmp_path / "review.json"
    path.write_text('{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}')
    result = invoke("mutate", "--platform", str(PLATFORM), "-n", "default", "-f", str(path))
    assert result.exit_code == 1
    assert result.stderr == (
        "kgov mutate: document 1 refused: malformed AdmissionReview: AdmissionReview.request is missing\n"
    )


def test_mutate_explains_a_delete_review_and_prints_no_object(tmp_path: Path) -> None:
    body = json.loads((ADMISSION / "v1-job-update-queue-label.json").read_text())
    body["request"].update(operation="DELETE", object=None)
    path = tmp_path / "review.json"
    path.write_text(json.dumps(body))
    result = invoke("mutate", "--platform", str(PLATFORM), "-n", "hyperpod-ns-research", "-f", str(path), "--explain")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""  # was "{}": an empty object printed for the DELETE's null object
    name = body["request"]["oldObject"]["metadata"]["name"]
    assert result.stderr.splitlines()[0] == f"# document 1 (DELETE): Job {name}"
    assert "#   unchanged: operation DELETE is not mutated" in result.stderr
