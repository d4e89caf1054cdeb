"""A team's node affinity that no node of its flavors can match strands the whole team
(webhook/core/platform/affinity.py): refused by `kgov policy` from the flavors' nodeLabels alone, and
by `kgov generate --nodes … --strict` against the inventory.

Regression: such a platform passed both, and every Job of the team stayed pending forever.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from webhook.cli import main
from webhook.core.platform.affinity import affinity_node_problems, affinity_problems
from webhook.core.platform.platform import PlatformError, parse_platform
from webhook.kube.files import load_nodes

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = yaml.safe_load((ROOT / "kueue-config" / "platform.yaml").read_text())
NODES = ROOT / "examples" / "nodes.json"
INSTANCE = "node.kubernetes.io/instance-type"
PATH = "teams[0].policy.nodeAffinity"


def with_affinity(*requirements: dict[str, Any], second_flavor: bool = False) -> dict[str, Any]:
    doc = copy.deepcopy(BUNDLED)
    research = doc["teams"][0]
    assert research["name"] == "research"
    research["policy"]["nodeAffinity"] = list(requirements)
    if second_flavor:
        p4 = {**copy.deepcopy(doc["flavors"][0]), "name": "p4d-24xlarge", "nodeLabels": {INSTANCE: "p4d.24xlarge"}}
        doc["flavors"].append(p4)
        research["quotas"].append({"flavor": "p4d-24xlarge", "resources": {"nvidia.com/gpu": {"nominalQuota": 8}}})
    return doc


def req(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


@pytest.mark.parametrize(
    ("requirement", "asks"),
    [
        (req(INSTANCE, "In", "p4d.24xlarge"), f"{INSTANCE} In ['p4d.24xlarge']"),
        (req(INSTANCE, "NotIn", "p5.48xlarge"), f"{INSTANCE} NotIn ['p5.48xlarge']"),
        (req(INSTANCE, "DoesNotExist"), f"{INSTANCE} DoesNotExist"),
    ],
)
def test_an_affinity_every_flavor_contradicts_is_an_error(requirement: dict[str, Any], asks: str) -> None:
    with pytest.raises(PlatformError) as caught:
        parse_platform(with_affinity(requirement))
    [problem] = caught.value.problems
    assert (problem.path, problem.severity) == (PATH, "error")
    assert problem.message == (
        f"no node of team 'research''s flavors can match its nodeAffinity (flavor 'p5-48xlarge' has "
        f"{{'{INSTANCE}': 'p5.48xlarge'}}, it asks {asks}): every workload of the team would stay pending; "
        "fix the affinity or the flavors' nodeLabels"
    )


def test_an_affinity_one_of_two_flavors_contradicts_is_a_warning() -> None:
    platform = parse_platform(with_affinity(req(INSTANCE, "In", "p5.48xlarge"), second_flavor=True))
    [problem] = affinity_problems(platform)
    assert (problem.path, problem.severity) == (PATH, "warning")
    assert problem.message == (
        f"the nodes of flavor 'p4d-24xlarge' ({{'{INSTANCE}': 'p4d.24xlarge'}}) never match {INSTANCE} In "
        "['p5.48xlarge']: team 'research''s quota in it is never used"
    )


def test_the_bundled_platform_and_an_affinity_on_other_labels_pass() -> None:
    assert affinity_problems(parse_platform(BUNDLED)) == []
    elsewhere = parse_platform(with_affinity(req("example.com/pool", "In", "a")))
    assert affinity_problems(elsewhere) == []  # the flavor does not say: only the nodes can
    exists = parse_platform(with_affinity(req(INSTANCE, "Exists"), req("example.com/pool", "In", "a")))
    assert affinity_problems(exists) == []


def test_against_the_nodes_a_label_no_node_has_strands_the_team() -> None:
    platform = parse_platform(with_affinity(req("example.com/pool", "In", "a")))
    nodes = load_nodes(NODES).nodes
    [warned] = affinity_node_problems(platform, nodes, "warning")
    assert (warned.path, warned.severity) == (PATH, "warning")
    assert "example.com/pool In ['a']; none of the 1 flavor(s)' nodes in the inventory has it" in warned.message
    assert [p.severity for p in affinity_node_problems(platform, nodes, "error")] == ["error"]
    matching = parse_platform(with_affinity(req("topology.k8s.aws/network-node-layer-3", "In", "nn-0cc11")))
    assert affinity_node_problems(matching, nodes, "error") == []


def test_the_commands_refuse_it(tmp_path: Path) -> None:
    contradicted = tmp_path / "contradicted.yaml"
    contradicted.write_text(yaml.safe_dump(with_affinity(req(INSTANCE, "In", "p4d.24xlarge"))))
    policy = CliRunner().invoke(main, ["policy", "--platform", str(contradicted)])
    assert policy.exit_code == 2
    assert policy.stderr.startswith(f"kgov policy: {contradicted}: invalid platform file\n  {PATH}: no node of team")
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(yaml.safe_dump(with_affinity(req("example.com/pool", "In", "a"))))
    args = ["generate", str(unknown), "--out", str(tmp_path / "out"), "--nodes", str(NODES)]
    assert CliRunner().invoke(main, args).exit_code == 0  # warned
    strict = CliRunner().invoke(main, [*args[:2], "--out", str(tmp_path / "strict"), *args[4:], "--strict"])
    assert strict.exit_code == 1, strict.output
    assert f"  {PATH}: no node of team 'research''s flavors can match its nodeAffinity" in strict.stderr
    assert not (tmp_path / "strict").exists()
