"""Input files that must be refused, not half-read: a key defined twice in any YAML or JSON file
kgov reads (last-wins would drop a team or weaken an enforcement), a NaN or infinity (named by its
path), a ``kgov topology -o`` suffix that names no format, and an EC2 topology document without
instances. Each test holds the failing input and the exact message and exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from support import PLATFORM

from webhook.cli import main
from webhook.core.objects.jsonbody import dotted_path
from webhook.core.platform.yamlload import DuplicateKeyError, locate_duplicate, no_duplicate_pairs
from webhook.kube.files import InputError, load_manifests, load_namespace_labels, parse_policies

REPO = Path(__file__).resolve().parents[1]
NODES = REPO / "examples" / "nodes.json"
POLICY_CONFIGMAP = REPO / "kueue-config" / "generated" / "policy-configmap.yaml"

#: Two ``teams:`` keys: the first team (alpha) was dropped without a word.
DUP_TEAMS = """\
apiVersion: kueue-governor.io/v1alpha1
kind: Platform
flavors:
  - name: cpu
    nodeLabels: {node.kubernetes.io/instance-type: m5.xlarge}
teams:
  - name: alpha
    quotas: [{flavor: cpu, resources: {cpu: {nominalQuota: 10}}}]
    policy:
      queue: {enforcement: enforce}
teams:
  - name: beta
    quotas: [{flavor: cpu, resources: {cpu: {nominalQuota: 10}}}]
"""

#: Two ``queue:`` keys: the compiled policy said warn where the first said enforce.
DUP_POLICY_KEY = """\
apiVersion: kueue-governor.io/v1alpha1
kind: Platform
flavors:
  - name: cpu
    nodeLabels: {node.kubernetes.io/instance-type: m5.xlarge}
teams:
  - name: alpha
    quotas: [{flavor: cpu, resources: {cpu: {nominalQuota: 10}}}]
    policy:
      queue: {enforcement: enforce}
      queue: {enforcement: warn}
"""

#: Two ``labels:`` keys: the queue name of the first was dropped (kubectl refuses the file).
DUP_LABELS_JOB = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: dk
  labels: {kueue.x-k8s.io/queue-name: hyperpod-ns-inference-localqueue}
  labels: {app: x}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: x, resources: {requests: {cpu: 1}}}]
"""


def kgov(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_generate_refuses_a_platform_file_with_two_teams_keys(tmp_path: Path) -> None:
    platform = write(tmp_path, "dup-teams-key.yaml", DUP_TEAMS)
    result = kgov("generate", str(platform), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2
    assert result.stderr == (
        f"kgov generate: {platform}: invalid platform file\n"
        f'  {platform} is not usable YAML: duplicate mapping key "teams" at line 11 column 1 '
        "(first at line 6 column 1)\n"
    )
    assert not (tmp_path / "out").exists()


def test_policy_refuses_a_team_policy_with_two_queue_keys(tmp_path: Path) -> None:
    platform = write(tmp_path, "dup-team-policy-key.yaml", DUP_POLICY_KEY)
    result = kgov("policy", "--platform", str(platform))
    assert result.exit_code == 2
    assert result.stderr == (
        f"kgov policy: {platform}: invalid platform file\n"
        f'  {platform} is not usable YAML: duplicate mapping key "queue" at line 11 column 7 '
        "(first at line 10 column 7) within teams[0].policy\n"
    )


def test_mutate_refuses_a_manifest_with_two_labels_keys(tmp_path: Path) -> None:
    manifest = write(tmp_path, "dupkey-job.yaml", DUP_LABELS_JOB)
    result = kgov("mutate", "--platform", str(PLATFORM), "-n", "hyperpod-ns-inference", "-f", str(manifest))
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        f'kgov mutate: {manifest}: duplicate mapping key "labels" at line 6 column 3 (first at line 5 column 3) '
        "within metadata\n"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # A JSON manifest is read by the same loader.
        (
            '{"kind": "Pod",\n "kind": "Job"}',
            'duplicate mapping key "kind" at line 2 column 2 (first at line 1 column 2)',
        ),
        # YAML 1 and "1" are one key in JSON.
        ("a: {1: x, '1': y}\n", 'duplicate mapping key "1" at line 1 column 11 (first at line 1 column 5) within a'),
        (
            "a: [{b: 1}, {b: 1, b: 2}]\n",
            'duplicate mapping key "b" at line 1 column 20 (first at line 1 column 14) within a[1]',
        ),
        ("---\na: 1\n---\nb: 1\nb: 2\n", 'duplicate mapping key "b" at line 5 column 1 (first at line 4 column 1)'),
        # The second key an alias of the first (one node, so PyYAML keeps only the anchor's line).
        (
            "b:\n  &k a: 1\n  *k : 2\n",
            'duplicate mapping key "a" (again as an alias of the key at line 2 column 3) within b',
        ),
    ],
)
def test_every_document_and_depth_is_checked(text: str, message: str) -> None:
    with pytest.raises(InputError) as caught:
        load_manifests(text, "m.yaml")
    assert str(caught.value) == f"m.yaml: {message}"


def test_keys_merged_with_yaml_merge_keys_may_be_overridden() -> None:
    text = "base: &base {cpu: 1, memory: 1Gi}\nlimits:\n  <<: *base\n  cpu: 2\n"
    assert load_manifests(text, "m.yaml") == [
        {"base": {"cpu": 1, "memory": "1Gi"}, "limits": {"cpu": 2, "memory": "1Gi"}}
    ]


def test_a_node_dump_in_json_with_a_duplicate_key_is_refused_with_its_line(tmp_path: Path) -> None:
    """The fast JSON path refuses it too, and the YAML reader then names the line."""
    nodes = json.loads(NODES.read_text())
    text = json.dumps(nodes, indent=1).replace('"kind": "List"', '"kind": "List",\n "kind": "NodeList"', 1)
    dump = write(tmp_path, "nodes.json", text)
    result = kgov("topology", "--nodes", str(dump))
    assert result.exit_code == 2
    assert (
        result.stderr
        == f'kgov topology: {dump}: duplicate mapping key "kind" at line 4 column 2 (first at line 3 column 2)\n'
    )


def test_a_pod_dump_with_a_duplicate_key_is_refused(tmp_path: Path) -> None:
    pods = write(
        tmp_path,
        "pods.json",
        '{"kind": "PodList", "items": [{"kind": "Pod", "metadata": {"name": "p", "name": "q"}}]}',
    )
    result = kgov("topology", "--nodes", str(NODES), "--pods", str(pods))
    assert result.exit_code == 2
    assert result.stderr == (
        f'kgov topology: {pods}: duplicate mapping key "name" at line 1 column 73 (first at line 1 column 60) '
        "within items[0].metadata\n"
    )


def test_a_namespace_dump_with_a_duplicate_key_is_refused(tmp_path: Path) -> None:
    dump = write(tmp_path, "ns.yaml", "kind: Namespace\nmetadata:\n  name: a\n  labels: {x: '1'}\n  labels: {}\n")
    with pytest.raises(InputError) as caught:
        load_namespace_labels(dump)
    assert str(caught.value) == (
        f'{dump}: duplicate mapping key "labels" at line 5 column 3 (first at line 4 column 3) within metadata'
    )


def test_a_policy_file_with_a_duplicate_key_is_refused(tmp_path: Path) -> None:
    policy = write(tmp_path, "policy.json", '{"kind": "PolicySet",\n "teams": [],\n "teams": []}')
    result = kgov("review", "--policy", str(policy))
    assert result.exit_code == 2
    assert result.stderr == (
        f'kgov review: {policy}: duplicate mapping key "teams" at line 3 column 2 (first at line 2 column 2)\n'
    )


def test_a_policy_configmap_whose_policy_json_repeats_a_key_is_refused(tmp_path: Path) -> None:
    """The policy.json string inside the ConfigMap (a file, or the object the server watches)."""
    text = POLICY_CONFIGMAP.read_text()
    document = load_manifests(text, "cm")[0]
    policy_text = document["data"]["policy.json"]
    document["data"]["policy.json"] = policy_text.replace('"kind":', '"kind": "PolicySet",\n  "kind":', 1)
    assert document["data"]["policy.json"] != policy_text
    with pytest.raises(InputError) as caught:
        parse_policies(document, "ConfigMap kgov-system/kgov-policy")
    line = document["data"]["policy.json"].split("\n").index('  "kind": "PolicySet",') + 1
    assert str(caught.value) == (
        "ConfigMap kgov-system/kgov-policy: data['policy.json']: duplicate mapping key \"kind\" "
        f"at line {line + 1} column 3 (first at line {line} column 3)"
    )
    configmap = write(tmp_path, "policy-configmap.json", json.dumps(document))
    result = kgov("review", "--policy", str(configmap))
    assert result.exit_code == 2
    assert result.stderr.startswith(
        f"kgov review: {configmap}: data['policy.json']: duplicate mapping key \"kind\" at line "
    )


def test_topology_label_refuses_a_document_with_a_duplicate_key(tmp_path: Path) -> None:
    source = write(
        tmp_path,
        "topology.json",
        '{"Instances": [{"InstanceId": "i-0123456789abcdef0",\n'
        ' "InstanceId": "i-0123456789abcdef1", "NetworkNodes": ["a", "b", "c"]}]}\n',
    )
    result = kgov("topology", "label", "--from", str(source), "--nodes", str(NODES))
    assert result.exit_code == 2
    assert result.stderr == (
        f'kgov topology label: {source}: duplicate mapping key "InstanceId" at line 2 column 2 '
        "(first at line 1 column 17) within Instances[0]\n"
    )


def test_json_duplicate_hook_names_the_key_and_is_located_by_the_yaml_reader() -> None:
    assert json.loads('{"a": 1, "b": {"c": 2}}', object_pairs_hook=no_duplicate_pairs) == {"a": 1, "b": {"c": 2}}
    with pytest.raises(DuplicateKeyError) as caught:
        json.loads('{"a": 1, "a": 1}', object_pairs_hook=no_duplicate_pairs)
    assert str(caught.value) == 'duplicate key "a"'
    located = locate_duplicate('{"a": 1, "a": 1}', caught.value)
    assert str(located) == 'duplicate mapping key "a" at line 1 column 10 (first at line 1 column 2)'
    # JSON the YAML reader does not read (YAML refuses a raw DEL character): the key alone.
    assert locate_duplicate('{"a": "\x7f", "a": 1}', caught.value) is caught.value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (".inf", "document 1 holds a number JSON cannot carry (infinity) at metadata.labels.team"),
        ("-.Inf", "document 1 holds a number JSON cannot carry (-infinity) at metadata.labels.team"),
    ],
)
def test_mutate_names_the_label_that_is_infinite(tmp_path: Path, value: str, message: str) -> None:
    manifest = write(
        tmp_path,
        "f-yamltypes2.yaml",
        DUP_LABELS_JOB.replace("  labels: {app: x}\n", "").replace(
            "hyperpod-ns-inference-localqueue}", f"hyperpod-ns-inference-localqueue, team: {value}}}"
        ),
    )
    result = kgov("mutate", "--platform", str(PLATFORM), "-n", "hyperpod-ns-inference", "-f", str(manifest))
    assert result.exit_code == 2
    assert result.stderr == f"kgov mutate: {manifest}: {message}\n"


def test_mutate_names_the_path_of_a_nan_nested_deep(tmp_path: Path) -> None:
    manifest = write(
        tmp_path,
        "deep-nan.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n---\napiVersion: batch/v1\nkind: Job\n"
        "metadata: {name: j}\nspec:\n  template:\n    spec:\n      containers:\n      - name: c\n"
        '        env: [{name: A, value: "1"}, {name: B, value: {deep: [1, [2, {z: .nan}]]}}]\n',
    )
    result = kgov("mutate", "--platform", str(PLATFORM), "-n", "hyperpod-ns-inference", "-f", str(manifest))
    assert result.exit_code == 2
    assert result.stderr == (
        f"kgov mutate: {manifest}: document 2 holds a number JSON cannot carry (NaN) at "
        "spec.template.spec.containers[0].env[1].value.deep[1][1].z\n"
    )


def test_a_path_with_a_step_repeated_twice_keeps_both() -> None:
    """Regression: ``deep[1][1]`` was written ``deep[1]`` (a run of two steps written once)."""
    assert dotted_path(["deep", 1, 1, "z"]) == "deep[1][1].z"
    assert dotted_path(["a", "a", "b"]) == "a.a.b"
    assert dotted_path(["a", 0, 0, 0]) == "a[0] (× 3)"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--out", "out.gif"),
            "--out out.gif: .gif is not a format kgov topology writes (.png, .svg, .json, or text: .txt or no "
            "suffix); or give -o table|tree|json|png|svg",
        ),
        (
            ("--out", "out.JPEG"),
            "--out out.JPEG: .JPEG is not a format kgov topology writes (.png, .svg, .json, or text: .txt or no "
            "suffix); or give -o table|tree|json|png|svg",
        ),
        (
            ("-o", "png", "--out", "t.svg"),
            "--out t.svg: a .svg file, but -o png; give --out FILE.png or -o svg",
        ),
        (
            ("-o", "table", "--out", "t.json"),
            "--out t.json: a .json file, but -o table; give --out FILE.txt or -o json",
        ),
        (
            ("-o", "t.json", "--out", "t.json"),
            "-o t.json: not a format (table|tree|json|png|svg)",
        ),
    ],
)
def test_topology_refuses_an_output_suffix_that_names_no_format_or_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    result = kgov("topology", "--nodes", str(NODES), *args)
    assert result.exit_code == 2
    assert result.stderr == f"kgov topology: {message}\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "fmt"),
    [
        (("--out", "t.json"), "json"),
        (("--out", "t.txt"), "table"),
        (("--out", "t"), "table"),
        (("-o", "tree", "--out", "t.out"), "tree"),
    ],
)
def test_topology_writes_the_format_the_suffix_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], fmt: str
) -> None:
    monkeypatch.chdir(tmp_path)
    result = kgov("topology", "--nodes", str(NODES), *args)
    assert result.exit_code == 0, result.output
    assert (tmp_path / args[-1]).read_text() == kgov("topology", "--nodes", str(NODES), "-o", fmt).stdout


@pytest.mark.parametrize(
    ("args", "legacy"),
    [
        (("-o", "t.json"), "kgov topology: warning: -o t.json names a file: this is deprecated, give --out t.json"),
        (("--format", "json", "--out", "t.json"), "kgov topology: warning: --format json is deprecated: give -o json"),
    ],
)
def test_topology_takes_the_old_output_flags_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], legacy: str
) -> None:
    """``-o FILE`` and ``--format FORMAT`` as they were before ``-o`` named a format everywhere."""
    monkeypatch.chdir(tmp_path)
    result = kgov("topology", "--nodes", str(NODES), *args)
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith(legacy)
    assert (tmp_path / "t.json").read_text() == kgov("topology", "--nodes", str(NODES), "-o", "json").stdout


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"Instances": []}', "no instances (Instances is empty)"),
        ('[{"Instances": []}, {"Instances": []}]', "no instances (Instances is empty on every page)"),
    ],
)
def test_topology_label_refuses_a_document_without_instances(tmp_path: Path, text: str, message: str) -> None:
    source = write(tmp_path, "lab-emptyinst.json", text)
    result = kgov("topology", "label", "--from", str(source), "--nodes", str(NODES))
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"kgov topology label: {source}: {message}, so nothing to label; expected `aws ec2 describe-instance-topology` "
        "output listing the cluster's instances (run in the cluster's region)\n"
    )


def test_topology_takes_the_old_format_and_file_flags_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: ``--format json -o t.json``, the form of earlier releases, was refused."""
    monkeypatch.chdir(tmp_path)
    result = kgov("topology", "--nodes", str(NODES), "--format", "json", "-o", "t.json")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "t.json").read_text() == kgov("topology", "--nodes", str(NODES), "-o", "json").stdout
    assert "kgov topology: warning: --format json is deprecated: give -o json" in result.stderr
