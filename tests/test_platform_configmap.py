"""A policy ConfigMap that carries the platform file itself (key ``platform.yaml``, the chart's
``platformFile``): compiled as it is read, the same PolicySet as ``kgov generate`` compiles; every
bad version refused with the platform's own messages (SPEC §8: "the server compiles the policy")."""

from __future__ import annotations

import re
from typing import Any

import pytest
from support import PLATFORM

from webhook.core.platform.platform import load_platform
from webhook.core.platform.policy import compile_policies
from webhook.kube.files import InputError, parse_policies

WHERE = "ConfigMap kgov-system/kgov-policy"


def configmap(data: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kgov-policy"}, "data": data}


def test_the_platform_file_in_a_configmap_compiles_to_the_generators_policy() -> None:
    text = PLATFORM.read_text(encoding="utf-8")
    policies = parse_policies(configmap({"platform.yaml": text}), WHERE, ["kgov-system"])
    expected = compile_policies(load_platform(PLATFORM), ["kgov-system"])
    assert policies == expected
    assert "kgov-system" in policies.excludedNamespaces
    assert [team.team for team in policies.teams] == ["research", "inference", "data-science"]


def test_an_invalid_platform_file_is_refused_with_its_problem_and_where() -> None:
    text = PLATFORM.read_text(encoding="utf-8").replace("cohort: ml-platform", "cohort: nowhere", 1)
    with pytest.raises(InputError) as caught:
        parse_policies(configmap({"platform.yaml": text}), WHERE)
    message = str(caught.value)
    assert message.startswith(f"{WHERE}: data['platform.yaml']: invalid platform file")
    assert "nowhere" in message


def test_yaml_that_does_not_parse_is_refused_with_its_line() -> None:
    expected = r"data\['platform.yaml'\]: invalid platform file\n  not valid YAML: .* at line 3 column 1"
    with pytest.raises(InputError, match=expected):
        parse_policies(configmap({"platform.yaml": "teams:\n  - name: [a\n"}), WHERE)


def test_a_configmap_with_both_keys_is_refused() -> None:
    with pytest.raises(InputError, match=re.escape("both data['policy.json'] and data['platform.yaml']")):
        parse_policies(configmap({"platform.yaml": "teams: []\n", "policy.json": "{}"}), WHERE)


def test_a_configmap_with_neither_key_names_both() -> None:
    with pytest.raises(InputError, match=re.escape("no data['policy.json'] (nor data['platform.yaml'])")):
        parse_policies(configmap({"other": "x"}), WHERE)


def test_a_platform_value_that_is_not_text_is_refused() -> None:
    with pytest.raises(InputError, match="is not a string"):
        parse_policies(configmap({"platform.yaml": 3}), WHERE)
