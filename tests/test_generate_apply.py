"""``kgov generate --apply``: which generated objects it applies, and in which order (the API calls
themselves run against the real API server in e2e/test_chart_helm_only.py)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from support import PLATFORM

from webhook.cli import main
from webhook.core.platform.platform import load_platform
from webhook.generate.apply import APPLY_ORDER, objects_to_apply
from webhook.generate.manifests import GenerateOptions, build_manifests


def test_every_kueue_object_is_applied_in_dependency_order_without_the_charts_own() -> None:
    manifests = build_manifests(
        load_platform(PLATFORM), GenerateOptions(namespaces=True, policy_namespace="kgov-system")
    )
    objects = objects_to_apply(manifests, "kgov-system")
    kinds = [obj["kind"] for obj in objects]
    assert kinds == sorted(kinds, key=APPLY_ORDER.index)
    assert "ConfigMap" not in kinds
    namespaces = [obj["metadata"]["name"] for obj in objects if obj["kind"] == "Namespace"]
    assert namespaces == ["ds-sandbox", "hyperpod-ns-data-science", "hyperpod-ns-inference", "hyperpod-ns-research"]
    queues = {(obj["metadata"]["namespace"], obj["metadata"]["name"]) for obj in objects if obj["kind"] == "LocalQueue"}
    assert ("hyperpod-ns-research", "hyperpod-ns-research-localqueue") in queues
    generated = sum(len(objs) for name, objs in manifests.items() if name != "policy-configmap.yaml")
    assert len(objects) == generated - 1  # all but the webhook's own Namespace


def test_apply_and_check_exclude_each_other(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["generate", str(PLATFORM), "--apply", "--check"])
    assert result.exit_code == 2
    assert "--apply and --check exclude each other" in result.output


def test_an_unreachable_cluster_is_a_clear_error_and_no_traceback(tmp_path: Path) -> None:
    kubeconfig = f"{tmp_path}/kubeconfig"
    with open(kubeconfig, "w", encoding="utf-8") as handle:
        handle.write(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
            "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
            "users: [{name: u, user: {token: t}}]\n"
            "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
        )
    result = CliRunner().invoke(main, ["generate", str(PLATFORM), "--apply", "--kubeconfig", kubeconfig])
    assert result.exit_code == 2, result.output
    assert "cannot reach the API server" in result.output
    assert "Traceback" not in result.output
