"""The Helm chart without a cluster: ``helm lint`` and renders with several values files (SPEC §8, §8b).

Runs in ``make helm-check`` (part of ``make test``); needs only the helm binary, built from its Go
module like the control plane's binaries. The live checks are in ``test_helm_cluster.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import build
from e2e.helm_support import CHART, CI_VALUES, PLATFORM_VALUES, Helm, HelmError, by_kind, one
from webhook.core.kueue.registration import webhook_rules
from webhook.core.platform.controllers import DEFAULT_CONTROLLERS
from webhook.core.platform.platform import load_platform
from webhook.generate.cel import controller_expression
from webhook.generate.chart import kinds_cel, kinds_document, platform_values

NAMESPACE = "kueue-governor-system"
VALUES_SETS = [("default", [PLATFORM_VALUES])] + [(path.stem, [PLATFORM_VALUES, path]) for path in CI_VALUES]


@pytest.fixture(scope="module")
def helm() -> Iterator[Helm]:
    tool = Helm()
    yield tool
    tool.close()


def _values(files: list[Path]) -> dict[str, Any]:
    merged: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    for path in files:
        _merge(merged, yaml.safe_load(path.read_text()))
    return merged


def _merge(into: dict[str, Any], update: dict[str, Any]) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def named(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [obj for obj in by_kind(objects, kind) if obj["metadata"]["name"] == name]
    return found


WIDENING = "kgov-kueue-governor-topology-widening"


def _check_widening(objects: list[dict[str, Any]], values: dict[str, Any], args: list[str], account: str) -> None:
    """Topology widening (server.topologyWidening with watchCluster): its argument, a ClusterRole for
    Workloads, the suspendable workload kinds and Events, a Role for its one Lease, both bound to
    the server's account; none of it when it is off."""
    names = {obj["metadata"]["name"] for obj in objects if obj["kind"] in ("ClusterRole", "Role")}
    if not (values["server"]["watchCluster"] and values["server"]["topologyWidening"]):
        assert WIDENING not in names and not any(a.startswith("--topology-widening") for a in args)
        return
    assert f"--topology-widening={NAMESPACE}/{WIDENING}" in args
    cluster_role = named(objects, "ClusterRole", WIDENING)
    assert cluster_role["rules"] == [
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get", "list", "watch", "patch"]},
        *[{**rule, "verbs": ["get", "patch"]} for rule in kinds_document()["widenable"]],
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
    ]
    lease = named(objects, "Role", WIDENING)
    assert lease["metadata"]["namespace"] == NAMESPACE
    assert lease["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [WIDENING],
            "verbs": ["get", "update", "patch"],
        },
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    ]
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        binding = named(objects, kind, WIDENING)
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]


def test_ci_values_files_exist() -> None:
    names = sorted(path.name for path in CI_VALUES)
    assert names == [
        "cert-manager-values.yaml",
        "fail-open-values.yaml",
        "fail-safe-mutate-values.yaml",
        "kueue-objects-values.yaml",
        "policy-file-values.yaml",
    ]


@pytest.mark.parametrize(("name", "files"), VALUES_SETS, ids=[name for name, _ in VALUES_SETS])
def test_helm_lint(helm: Helm, name: str, files: list[Path]) -> None:
    args = ["--kube-version", build.KUBERNETES_VERSION, *[a for f in files for a in ("-f", str(f))]]
    output = helm.run("lint", "--strict", str(CHART), "-n", NAMESPACE, *args)
    assert "1 chart(s) linted, 0 chart(s) failed" in output


@pytest.mark.parametrize(("name", "files"), VALUES_SETS, ids=[name for name, _ in VALUES_SETS])
def test_render(helm: Helm, name: str, files: list[Path]) -> None:
    values = _values(files)
    objects = helm.template(files, namespace=NAMESPACE)
    kinds = kinds_document()
    # The CEL with the platform's controllers (those of the compiled policy the values carry).
    kinds["cel"] = kinds_cel(json.loads(values["platform"]["policy"])["controllers"])
    assert kinds["cel"]["notAManagedChild"] != kinds_document()["cel"]["notAManagedChild"]

    webhook = one(objects, "MutatingWebhookConfiguration")
    assert webhook["metadata"]["name"] < "kueue-mutating-webhook-configuration"
    (hook,) = webhook["webhooks"]
    assert hook["sideEffects"] == "None"
    assert hook["reinvocationPolicy"] == "IfNeeded"
    assert hook["timeoutSeconds"] == values["webhook"]["timeoutSeconds"] <= 5
    assert hook["failurePolicy"] == values["webhook"]["failurePolicy"]
    assert hook["rules"] == webhook_rules()
    (selector,) = hook["namespaceSelector"]["matchExpressions"]
    assert selector["key"] == "kubernetes.io/metadata.name" and selector["operator"] == "NotIn"
    assert {"kube-system", "kube-node-lease", NAMESPACE} <= set(selector["values"])
    conditions = {c["name"]: c["expression"] for c in hook["matchConditions"]}
    assert conditions == {
        "not-a-kueue-managed-child": kinds["cel"]["notAManagedChild"],
        "not-left-alone": kinds["cel"]["notLeftAlone"],
        "status-changes-metadata": kinds["cel"]["statusChangesMetadata"],
    }

    deployment = one(objects, "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == values["replicaCount"] >= 2
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    server = values["server"]
    # One kgov serve process per container, sharing the webhook port (SO_REUSEPORT), each probed
    # and scraped on its own metrics port: a killed process leaves the pod's port served.
    containers = spec["containers"]
    assert [c["name"] for c in containers] == ["governor", "governor-2"] and server["processes"] == 2
    for index, process in enumerate(containers):
        metrics = "metrics" if index == 0 else f"metrics-{index + 1}"
        assert process["securityContext"]["readOnlyRootFilesystem"] is True
        assert process["securityContext"]["allowPrivilegeEscalation"] is False
        assert process["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}
        assert "--reuse-port" in process["args"]
        assert f"--metrics-port={server['metricsPort'] + index}" in process["args"]
        assert {"name": metrics, "containerPort": server["metricsPort"] + index, "protocol": "TCP"} in process["ports"]
        assert process["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": metrics, "scheme": "HTTP"}
        assert process["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": metrics, "scheme": "HTTP"}
        same = [arg for arg in process["args"] if not arg.startswith("--metrics-port=")]
        assert same == [arg for arg in containers[0]["args"] if not arg.startswith("--metrics-port=")]
    container = containers[0]
    assert {"name": "https", "containerPort": server["port"], "protocol": "TCP"} in container["ports"]
    assert all(port["name"] != "https" for port in containers[1]["ports"])
    assert f"--shutdown-delay={server['shutdownDelaySeconds']}" in container["args"]
    assert f"--shutdown-timeout={server['shutdownTimeoutSeconds']}" in container["args"]
    # The pod is not killed mid-drain: the grace period outlasts the not-ready delay plus the drain.
    assert spec["terminationGracePeriodSeconds"] > server["shutdownDelaySeconds"] + server["shutdownTimeoutSeconds"]
    assert [c["topologyKey"] for c in spec["topologySpreadConstraints"]] == [
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    ]
    assert one(objects, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    assert one(objects, "Service")["spec"]["ports"][0]["targetPort"] == "https"

    role = named(objects, "ClusterRole", "kgov-kueue-governor")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["namespaces", "nodes"], "verbs": ["get", "list", "watch"]},
        # the runtime a TrainJob references (webhook.kube.cache.runtime_caches)
        {
            "apiGroups": ["trainer.kubeflow.org"],
            "resources": ["clustertrainingruntimes", "trainingruntimes"],
            "verbs": ["get", "list", "watch"],
        },
    ]
    _check_widening(objects, values, container["args"], spec["serviceAccountName"])
    config_map = one(objects, "ConfigMap")
    policy_name = config_map["metadata"]["name"]
    assert policy_name == "kgov-kueue-governor-policy"
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    mounts = {mount["name"] for mount in container["volumeMounts"]}
    env = {variable["name"]: variable["valueFrom"]["fieldRef"]["fieldPath"] for variable in container["env"]}
    assert env == {"POD_NAMESPACE": "metadata.namespace", "POD_NAME": "metadata.name"}
    if server["policySource"] == "configmap":
        # Watched through the API: that one ConfigMap only, Events in the release namespace only.
        assert f"--policy-configmap={NAMESPACE}/{policy_name}" in container["args"]
        assert not any(arg.startswith("--policy=") for arg in container["args"])
        assert "policy" not in volumes and "policy" not in mounts
        namespaced = named(objects, "Role", "kgov-kueue-governor")
        assert namespaced["metadata"]["namespace"] == NAMESPACE
        assert namespaced["rules"] == [
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": [policy_name],
                "verbs": ["get", "list", "watch"],
            },
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
        ]
        binding = named(objects, "RoleBinding", "kgov-kueue-governor")
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "kgov-kueue-governor",
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": spec["serviceAccountName"], "namespace": NAMESPACE}
        ]
    else:
        assert server["policySource"] == "file"
        assert "--policy=/etc/kueue-governor/policy/policy.json" in container["args"]
        assert not any(arg.startswith("--policy-configmap") for arg in container["args"])
        assert volumes["policy"]["configMap"] == {"name": policy_name} and "policy" in mounts
        # No Role of the policy ConfigMap (only topology widening's Lease, if that is on).
        assert {r["metadata"]["name"] for r in [*by_kind(objects, "Role"), *by_kind(objects, "RoleBinding")]} <= {
            WIDENING
        }

    expected = platform_values(load_platform(str(PLATFORM_VALUES.parents[3] / "kueue-config" / "platform.yaml")))
    assert json.loads(config_map["data"]["policy.json"]) == json.loads(expected["platform"]["policy"])

    teams = values["platform"]["teams"]
    policies = by_kind(objects, "ValidatingAdmissionPolicy")
    bindings = by_kind(objects, "ValidatingAdmissionPolicyBinding")
    assert [p["metadata"]["name"] for p in policies] == [f"kgov-governor-queue-{t['name']}" for t in teams]
    for team, policy, binding in zip(teams, policies, bindings, strict=True):
        (child, version, validation) = policy["spec"]["validations"]
        # A version of a kind that Kueue does not manage (kubeflow.org/v1 MPIJob) is refused.
        assert version["expression"] == kinds["cel"]["managedVersion"]
        assert "request.kind.version == 'v1'" in version["expression"]
        # A workload a user makes a child of a Kueue-managed owner (a forged ownerReference) is refused.
        assert child["expression"] == kinds["cel"]["childOfAController"]
        assert f'team "{team["name"]}" only a controller makes' in child["message"]
        assert child["message"].endswith("(the platform file's controllers lists who may)")
        assert f'team "{team["name"]}"' in validation["message"]
        assert binding["spec"]["policyName"] == policy["metadata"]["name"]
        assert binding["spec"]["validationActions"] == ["Deny"]
        (expression,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
        assert expression == {"key": "kubernetes.io/metadata.name", "operator": "In", "values": team["namespaces"]}
        if team["queueEnforced"]:
            assert f"variables.queue in {json.dumps(team['queues'])}" in validation["expression"]

    _check_fail_safe(values, objects, kinds)

    mode = values["certs"]["mode"]
    if mode == "self-managed":
        secrets = {s["metadata"]["name"]: s for s in by_kind(objects, "Secret")}
        assert set(secrets) == {"kgov-kueue-governor-ca", "kgov-kueue-governor-tls"}
        assert hook["clientConfig"]["caBundle"] == secrets["kgov-kueue-governor-ca"]["data"]["ca.crt"]
        assert by_kind(objects, "Certificate") == []
    else:
        assert "caBundle" not in hook["clientConfig"]
        annotation = webhook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        assert annotation == f"{NAMESPACE}/kgov-kueue-governor-serving"
        serving = next(c for c in by_kind(objects, "Certificate") if c["metadata"]["name"].endswith("-serving"))
        assert serving["spec"]["secretName"] == "kgov-kueue-governor-tls"
        assert serving["spec"]["dnsNames"] == [
            f"kgov-kueue-governor.{NAMESPACE}.svc",
            f"kgov-kueue-governor.{NAMESPACE}.svc.cluster.local",
        ]
        assert by_kind(objects, "Secret") == []

    kueue_kinds = {"Topology", "ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass"}
    rendered_kinds = {obj["kind"] for obj in objects}
    if values["kueueObjects"]["enabled"]:
        assert kueue_kinds <= rendered_kinds
        assert len(by_kind(objects, "Namespace")) == len(values["platform"]["namespaces"]) == 4
    else:
        assert not kueue_kinds & rendered_kinds


def _check_fail_safe(values: dict[str, Any], objects: list[dict[str, Any]], kinds: dict[str, Any]) -> None:
    """failSafe.mode mutate: a MutatingAdmissionPolicy per team that fills something, with the
    mutations `kgov chart values` computed, CREATE only, and a binding to the team's namespaces;
    the ValidatingAdmissionPolicy stays. Other modes: no MutatingAdmissionPolicy."""
    policies = by_kind(objects, "MutatingAdmissionPolicy")
    bindings = by_kind(objects, "MutatingAdmissionPolicyBinding")
    if values["failSafe"]["mode"] != "mutate":
        assert policies == [] and bindings == []
        return
    teams = [t for t in values["platform"]["teams"] if t["fill"]]
    assert [p["metadata"]["name"] for p in policies] == [f"kgov-governor-fill-{t['name']}" for t in teams]
    assert len(teams) == 3 and by_kind(objects, "ValidatingAdmissionPolicy")
    for team, policy, binding in zip(teams, policies, bindings, strict=True):
        assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
        spec = policy["spec"]
        assert spec["mutations"] == team["fill"]["mutations"] and spec["variables"] == team["fill"]["variables"]
        assert spec["failurePolicy"] == "Ignore" and spec["reinvocationPolicy"] == "Never"
        assert {op for rule in spec["matchConstraints"]["resourceRules"] for op in rule["operations"]} == {"CREATE"}
        assert spec["matchConstraints"]["resourceRules"] == kinds["fillRules"]
        assert spec["matchConditions"][0]["expression"] == kinds["cel"]["notAManagedChild"]
        assert all(m["patchType"] == "JSONPatch" for m in spec["mutations"])
        assert team["queues"][0] in spec["mutations"][1]["jsonPatch"]["expression"]
        assert binding["spec"]["policyName"] == policy["metadata"]["name"]
        (expression,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
        assert expression == {"key": "kubernetes.io/metadata.name", "operator": "In", "values": team["namespaces"]}


def _controller_conditions(objects: list[dict[str, Any]]) -> set[str]:
    """The ``not-a-kueue-managed-child`` CEL of every webhook and admission policy of a render."""
    found = {
        c["expression"]
        for hook in one(objects, "MutatingWebhookConfiguration")["webhooks"]
        for c in hook["matchConditions"]
        if c["name"] == "not-a-kueue-managed-child"
    }
    for kind in ("ValidatingAdmissionPolicy", "MutatingAdmissionPolicy"):
        for policy in by_kind(objects, kind):
            found |= {
                c["expression"] for c in policy["spec"]["matchConditions"] if c["name"] == "not-a-kueue-managed-child"
            }
    return found


def test_the_platforms_controllers_are_in_every_cel_check(helm: Helm) -> None:
    """platform.controllerExpression (``kgov chart values``) is the controller check of the webhook's
    matchConditions and of both admission policies; values without it get the default controllers."""
    mutate = CHART / "ci" / "fail-safe-mutate-values.yaml"
    argo = ["system:serviceaccount:argo:argo-workflow"]
    objects = helm.template(
        [PLATFORM_VALUES, mutate], {"platform.controllerExpression": json.dumps(controller_expression(argo))}
    )
    assert _controller_conditions(objects) == {kinds_cel(argo)["notAManagedChild"]}
    (child, *_) = by_kind(objects, "ValidatingAdmissionPolicy")[0]["spec"]["validations"]
    assert child["expression"] == kinds_cel(argo)["childOfAController"]
    assert "'system:serviceaccount:argo:argo-workflow'" in child["expression"]
    objects = helm.template([PLATFORM_VALUES, mutate], {"platform.controllerExpression": '""'})
    assert _controller_conditions(objects) == {kinds_cel(DEFAULT_CONTROLLERS)["notAManagedChild"]}


def test_one_process_per_pod_is_probed_over_tls_without_reuse_port(helm: Helm) -> None:
    objects = helm.template(settings={"server.processes": "1"})
    (container,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "governor" and "--reuse-port" not in container["args"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}
    assert [port["name"] for port in container["ports"]] == ["https", "metrics"]


def test_fail_safe_none_renders_no_admission_policy(helm: Helm) -> None:
    objects = helm.template([PLATFORM_VALUES], {"failSafe.mode": '"none"'})
    assert by_kind(objects, "ValidatingAdmissionPolicy") == [] and by_kind(objects, "MutatingAdmissionPolicy") == []


def test_cert_manager_renders_are_identical(helm: Helm) -> None:
    files = [PLATFORM_VALUES, CHART / "ci" / "cert-manager-values.yaml"]
    args = ["template", "kgov", str(CHART), "--kube-version", build.KUBERNETES_VERSION]
    args += ["-f", str(files[0]), "-f", str(files[1])]
    assert helm.run(*args) == helm.run(*args)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"webhook.name": '"zz-governor"'}, "must sort before Kueue's kueue-mutating-webhook-configuration"),
        (
            {"webhook.failurePolicy": '"Sometimes"'},
            "at '/webhook/failurePolicy': value must be one of 'Fail', 'Ignore'",
        ),
        ({"webhook.timeoutSeconds": "45"}, "at '/webhook/timeoutSeconds'"),
        ({"certs.mode": '"vault"'}, "at '/certs/mode': value must be one of 'self-managed', 'cert-manager'"),
        ({"failSafe.mode": '"mutating"'}, "at '/failSafe/mode': value must be one of 'mutate', 'validate', 'none'"),
        ({"platform.policy": '""'}, "kgov chart values PLATFORM --out platform-values.yaml"),
        ({"terminationGracePeriodSeconds": "25"}, "the pod would be killed mid-drain"),
    ],
)
def test_bad_values_are_refused_with_the_reason(helm: Helm, settings: dict[str, str], message: str) -> None:
    with pytest.raises(HelmError) as caught:
        helm.template([PLATFORM_VALUES], settings)
    assert message in caught.value.stderr


def test_without_platform_values_the_chart_says_how_to_make_them(helm: Helm) -> None:
    with pytest.raises(HelmError) as caught:
        helm.template([])
    assert "kgov chart values PLATFORM" in caught.value.stderr
