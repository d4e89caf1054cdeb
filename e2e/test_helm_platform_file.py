"""The chart with the platform file itself as values (SPEC §8 "Helm alone installs it"), without a
cluster: ``helm template -f platform.yaml`` renders what ``kgov chart values`` values render (the
same fail-safe policies and webhook, a policy the server compiles to the same PolicySet), plus the
hook Job that applies the Kueue objects with nothing but create and patch on their kinds; the
schema refuses a bad platform file before anything renders.

Runs in ``make helm-check``; the install on the real node is e2e/test_chart_helm_only.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import build
from e2e.helm_support import CHART, PLATFORM_VALUES, Helm, HelmError, by_kind, one
from e2e.support import REPO
from webhook.core.platform.platform import parse_platform
from webhook.generate.chart import platform_values
from webhook.generate.chart_schema import PLATFORM_KEYS
from webhook.kube.files import parse_policies

NAMESPACE = "kueue-governor-system"
PLATFORM = REPO / "kueue-config" / "platform.yaml"
#: What the fail-safe and the webhook are made of: the same whichever way the platform comes.
REGISTRATION = ("MutatingWebhookConfiguration", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


@pytest.fixture(scope="module")
def helm() -> Iterator[Helm]:
    tool = Helm()
    yield tool
    tool.close()


def _registration(objects: list[dict[str, Any]]) -> dict[tuple[str, str], Any]:
    """The webhook and fail-safe objects by kind and name; the caBundle (a new CA each offline
    render) left out."""
    found = {(obj["kind"], obj["metadata"]["name"]): obj for kind in REGISTRATION for obj in by_kind(objects, kind)}
    for obj in found.values():
        for hook in obj.get("webhooks") or []:
            hook["clientConfig"].pop("caBundle", None)
    return found


def _write(path: Path, document: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def _policy_configmap(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (configmap,) = [
        obj for obj in by_kind(objects, "ConfigMap") if obj["metadata"]["name"] == "kgov-kueue-governor-policy"
    ]
    return configmap


def test_the_platform_file_renders_what_the_compiled_values_render(helm: Helm) -> None:
    helm_only = helm.template([PLATFORM], namespace=NAMESPACE)
    compiled = helm.template([PLATFORM_VALUES], namespace=NAMESPACE)
    assert _registration(helm_only) == _registration(compiled)
    assert len(by_kind(helm_only, "ValidatingAdmissionPolicyBinding")) == 3
    # The server compiles the ConfigMap's platform file to the policy `kgov chart values` compiled.
    configmap = _policy_configmap(helm_only)
    assert list(configmap["data"]) == ["platform.yaml"]
    served = parse_policies(configmap, "ConfigMap", [NAMESPACE])
    expected = parse_policies(_policy_configmap(compiled), "ConfigMap", [NAMESPACE])
    assert served == expected
    deployment = one(helm_only, "Deployment")
    container, *_ = deployment["spec"]["template"]["spec"]["containers"]  # the first of server.processes
    assert f"--policy-configmap={NAMESPACE}/kgov-kueue-governor-policy" in container["args"]


def test_controllers_selectors_and_queues_of_another_platform_render_the_same_both_ways(
    helm: Helm, tmp_path: Path
) -> None:
    document = yaml.safe_load(PLATFORM.read_text(encoding="utf-8"))
    document["naming"] = "default"
    document["controllers"] = ["system:serviceaccount:kube-system:job-controller", "system:serviceaccount:ops:*"]
    research, inference, science = document["teams"]
    research["namespaces"] = ["research-a", "research-b"]
    inference["namespaceSelector"] = {"matchLabels": {"team": "inference"}}
    science["policy"]["queue"] = {
        "default": "ds-batch",
        "allowed": ["ds-batch", "ds-interactive"],
        "enforcement": "enforce",
    }
    platform_file = _write(tmp_path / "platform.yaml", document)
    compiled = platform_values(parse_platform(document), NAMESPACE)
    # The models write a selector's empty matchExpressions out ([]), the file leaves it away: the same selector.
    assert compiled["platform"]["teams"][1]["namespaceSelector"].pop("matchExpressions") == []
    values = _write(tmp_path / "values.yaml", compiled)
    helm_only = helm.template([platform_file], namespace=NAMESPACE)
    assert _registration(helm_only) == _registration(helm.template([values], namespace=NAMESPACE))
    bindings = {obj["metadata"]["name"]: obj for obj in by_kind(helm_only, "ValidatingAdmissionPolicyBinding")}
    assert bindings["kgov-governor-queue-inference-selected"]["spec"]["matchResources"]["namespaceSelector"] == {
        "matchLabels": {"team": "inference"}
    }
    webhook = one(helm_only, "MutatingWebhookConfiguration")
    conditions = json.dumps(webhook["webhooks"][0]["matchConditions"])
    assert "^system:serviceaccount:ops:[^:]+$" in conditions


def test_the_hook_job_applies_the_platform_with_create_and_patch_only(helm: Helm) -> None:
    objects = helm.template([PLATFORM], namespace=NAMESPACE)
    job = one(objects, "Job")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    spec = job["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["args"] == [
        "generate",
        "/etc/kueue-governor/platform/platform.yaml",
        "--apply",
        f"--policy-namespace={NAMESPACE}",
        "--namespaces",
    ]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["serviceAccountName"] == "kgov-kueue-governor-kueue-apply"
    (volume,) = [v for v in spec["volumes"] if v["name"] == "platform"]
    assert volume["configMap"] == {
        "name": "kgov-kueue-governor-policy",
        "items": [{"key": "platform.yaml", "path": "platform.yaml"}],
    }
    (role,) = [obj for obj in by_kind(objects, "ClusterRole") if obj["metadata"]["name"].endswith("-kueue-apply")]
    assert {verb for rule in role["rules"] for verb in rule["verbs"]} == {"create", "patch"}
    assert sorted(resource for rule in role["rules"] for resource in rule["resources"]) == [
        "clusterqueues",
        "cohorts",
        "localqueues",
        "namespaces",
        "priorityclasses",
        "resourceflavors",
        "topologies",
        "workloadpriorityclasses",
    ]
    hooks = [obj for obj in objects if "helm.sh/hook" in (obj["metadata"].get("annotations") or {})]
    assert sorted(obj["kind"] for obj in hooks) == ["ClusterRole", "ClusterRoleBinding", "Job", "ServiceAccount"]
    assert all("hook-succeeded" in obj["metadata"]["annotations"]["helm.sh/hook-delete-policy"] for obj in hooks)


def test_without_namespaces_the_job_may_not_touch_namespaces(helm: Helm) -> None:
    objects = helm.template([PLATFORM], {"kueueApply.namespaces": "false"}, namespace=NAMESPACE)
    (container,) = one(objects, "Job")["spec"]["template"]["spec"]["containers"]
    assert "--namespaces" not in container["args"]
    (role,) = [obj for obj in by_kind(objects, "ClusterRole") if obj["metadata"]["name"].endswith("-kueue-apply")]
    assert "namespaces" not in [resource for rule in role["rules"] for resource in rule["resources"]]


def test_the_compiled_values_render_no_job_and_keep_policy_json(helm: Helm) -> None:
    objects = helm.template([PLATFORM_VALUES], namespace=NAMESPACE)
    assert by_kind(objects, "Job") == []
    assert list(_policy_configmap(objects)["data"]) == ["policy.json"]


def test_the_policy_file_source_reads_the_platform_file(helm: Helm) -> None:
    objects = helm.template([PLATFORM], {"server.policySource": '"file"'}, namespace=NAMESPACE)
    container, *_ = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]  # the first process
    assert "--platform=/etc/kueue-governor/policy/platform.yaml" in container["args"]


def test_a_platform_file_the_schema_refuses_renders_nothing(helm: Helm, tmp_path: Path) -> None:
    document = yaml.safe_load(PLATFORM.read_text(encoding="utf-8"))
    document["teams"][0]["quota"] = document["teams"][0].pop("quotas")
    with pytest.raises(HelmError) as caught:
        helm.template([_write(tmp_path / "platform.yaml", document)], namespace=NAMESPACE)
    assert "values don't meet the specifications of the schema" in caught.value.stderr
    assert "/teams/0" in caught.value.stderr
    assert "quota" in caught.value.stderr


def test_both_forms_at_once_and_mutate_mode_are_refused(helm: Helm) -> None:
    with pytest.raises(HelmError, match="give the platform once"):
        helm.template([PLATFORM, PLATFORM_VALUES], namespace=NAMESPACE)
    with pytest.raises(HelmError, match=r"failSafe\.mode mutate needs"):
        helm.template([PLATFORM], {"failSafe.mode": '"mutate"'}, namespace=NAMESPACE)
    with pytest.raises(HelmError, match=r"with the platform file itself the hook Job applies them"):
        helm.template([PLATFORM], {"kueueObjects.enabled": "true"}, namespace=NAMESPACE)


def test_no_platform_at_all_says_both_ways(helm: Helm) -> None:
    with pytest.raises(HelmError, match=r"-f platform.yaml\), or the values `kgov chart values"):
        helm.template([], namespace=NAMESPACE)


def test_lint_with_the_platform_file(helm: Helm) -> None:
    args = ["--kube-version", build.KUBERNETES_VERSION, "-f", str(PLATFORM)]
    assert "0 chart(s) failed" in helm.run("lint", "--strict", str(CHART), "-n", NAMESPACE, *args)


def test_the_charts_platform_keys_are_the_models() -> None:
    text = (CHART / "templates" / "_platform.tpl").read_text(encoding="utf-8")
    start = text.index('{{- define "kueue-governor.platformKeys" -}}\n') + len(
        '{{- define "kueue-governor.platformKeys" -}}\n'
    )
    assert tuple(text[start:].split("\n", 1)[0].split()) == PLATFORM_KEYS
