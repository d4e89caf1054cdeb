"""The webhook on objects a MutatingAdmissionPolicy filled in (SPEC §8b, :mod:`webhook.core.plan.policy_fill`).

A value the marker ``kueue-governor.io/filled-by-policy`` names, and that equals what the team's
policy fills, is planned as absent on CREATE: for every kind of the table and every team of the
bundled platform, the webhook makes of the filled object exactly what it makes of the user's. The
filled objects are built here as the generated policies fill them (``e2e/test_admission_policies.py``
has the API server do it for Jobs and JobSets).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support import aws_nodes, bundled_teams, job, review_body
from tests.workloads import build
from webhook.core.admission.review import review
from webhook.core.kueue.kinds import KINDS, WorkloadKind
from webhook.core.kueue.view import PRIORITY_LABEL, QUEUE_LABEL, kueue_view
from webhook.core.objects.paths import Key, lookup
from webhook.core.plan.patch import apply_patch
from webhook.core.plan.policy_fill import (
    FILLED_BY_POLICY,
    filled_values,
    marked,
    marker_path,
    static_templates,
    topology_fill,
    topology_template,
)
from webhook.core.plan.rules.topology import ELASTIC_JOB, GROUP_NAME, TAS_ANNOTATIONS
from webhook.core.platform.policy import TeamPolicyCompiled

TEAMS = {"research": "hyperpod-ns-research", "inference": "hyperpod-ns-inference", "data-science": "ds-sandbox"}


def _put(obj: dict[str, Any], path: tuple[Key, ...], value: Any) -> None:
    node = obj
    for key in path[:-1]:
        node = node.setdefault(str(key), {})
    node[str(path[-1])] = value


def _team(name: str) -> TeamPolicyCompiled:
    index = bundled_teams()
    resolution = index.resolve(TEAMS[name], None)
    assert resolution.team is not None
    return resolution.team


def as_the_policy_fills(obj: dict[str, Any], row: WorkloadKind, team: TeamPolicyCompiled) -> dict[str, Any]:
    """``obj`` as the team's generated MutatingAdmissionPolicy leaves it (its mutations, in order)."""
    out = copy.deepcopy(obj)
    labels = (*row.labels_at, "labels")
    tokens = []
    queue = team.queue.default
    need_queue = bool(queue) and not lookup(out, (*labels, QUEUE_LABEL))
    priority = team.kueuePriority.default if team.kueuePriority and row.embedded is None else None
    asked = any(lookup(p.base, p.rule.layout.priority) for p in kueue_view(out, row).podsets)
    need_priority = bool(priority) and not lookup(out, (*labels, PRIORITY_LABEL)) and not asked
    fill, template = topology_fill(team.topology), topology_template(row)
    need_topology = False
    if fill is not None and template is not None and lookup(out, template.template) is not None:
        annotations = lookup(out, (*template.template, "metadata", "annotations")) or {}
        elastic = (lookup(out, ("metadata", "annotations", ELASTIC_JOB)) == "true") and fill[0] in row.elastic_forbids
        need_topology = not any(k in annotations for k in (*TAS_ANNOTATIONS, GROUP_NAME)) and not elastic
    for token, needed in (("queue", need_queue), ("priority", need_priority), ("topology", need_topology)):
        if needed:
            tokens.append(token)
    if tokens:
        _put(out, marker_path(row), ",".join(tokens))
    if need_queue:
        _put(out, (*labels, QUEUE_LABEL), queue)
        if row.suspend is not None and lookup(out, row.suspend) is not True:
            _put(out, row.suspend, True)
    if need_priority:
        _put(out, (*labels, PRIORITY_LABEL), priority)
    if row.pod_labels:
        for rule in static_templates(row):
            for label in (QUEUE_LABEL, PRIORITY_LABEL):
                value = lookup(out, (*labels, label))
                if value and not lookup(out, (*rule.template, "metadata", "labels", label)):
                    _put(out, (*rule.template, "metadata", "labels", label), value)
    if need_topology and fill is not None and template is not None:
        _put(out, (*template.template, "metadata", "annotations", fill[0]), fill[1])
    return out


def _admitted(obj: dict[str, Any], namespace: str) -> tuple[bool, dict[str, Any] | str]:
    outcome = review(review_body(obj, namespace), bundled_teams(), inventory=aws_nodes())
    if not outcome.plan.allowed:
        return False, "; ".join(outcome.plan.denials)
    return True, apply_patch(obj, outcome.patch)


def _rows() -> list[WorkloadKind]:
    return [row for row in KINDS if not row.skip_if]


@pytest.mark.parametrize("team", list(TEAMS))
@pytest.mark.parametrize("row", _rows(), ids=lambda row: f"{row.kind}")
def test_filled_object_gets_what_the_users_object_gets(row: WorkloadKind, team: str) -> None:
    user = build(row)
    user["metadata"]["namespace"] = TEAMS[team]
    filled = as_the_policy_fills(user, row, _team(team))
    alone = _admitted(user, TEAMS[team])
    both = _admitted(filled, TEAMS[team])
    assert both == alone
    if both[0]:
        assert isinstance(both[1], dict) and FILLED_BY_POLICY not in str(both[1])
        again = review(review_body(both[1], TEAMS[team]), bundled_teams(), inventory=aws_nodes())
        assert again.patch == []  # idempotent: the webhook's own output gets no patch


def test_the_webhook_follows_the_pods_priority_class_the_policy_could_not_read() -> None:
    # research's default is training-priority; a marker on it while the pods ask for
    # experimentation-priority (which the team may use): the webhook's choice replaces it.
    user = job()
    user["spec"]["template"]["spec"]["priorityClassName"] = "experimentation-priority"
    filled = copy.deepcopy(user)
    filled["metadata"]["labels"] = {QUEUE_LABEL: "hyperpod-ns-research-localqueue", PRIORITY_LABEL: "training-priority"}
    filled["metadata"]["annotations"] = {FILLED_BY_POLICY: "queue,priority"}
    filled["spec"]["suspend"] = True
    allowed, result = _admitted(filled, "hyperpod-ns-research")
    assert allowed and isinstance(result, dict)
    assert result["metadata"]["labels"][PRIORITY_LABEL] == "experimentation-priority"
    assert "annotations" not in result["metadata"]  # the marker was the only annotation
    assert result == _admitted(user, "hyperpod-ns-research")[1]


def test_a_marker_on_a_value_the_policy_does_not_write_is_not_believed() -> None:
    # research enforces its queue: another team's queue stays the user's choice, and is refused.
    forged = job()
    forged["metadata"]["labels"] = {QUEUE_LABEL: "hyperpod-ns-inference-localqueue"}
    forged["metadata"]["annotations"] = {FILLED_BY_POLICY: "queue"}
    (row,) = [r for r in KINDS if r.kind == "Job"]
    assert marked(forged, row) == {"queue"} and filled_values(forged, row, _team("research")) == []
    allowed, message = _admitted(forged, "hyperpod-ns-research")
    assert not allowed and "hyperpod-ns-inference-localqueue" in str(message)
    # a marker on nothing the policy writes is the user's annotation: kept (the patch is additive)
    own = job()
    own["metadata"]["annotations"] = {FILLED_BY_POLICY: "topology"}  # research's topology is auto: never filled
    allowed, result = _admitted(own, "hyperpod-ns-research")
    assert allowed and isinstance(result, dict)
    assert result["metadata"]["annotations"] == {FILLED_BY_POLICY: "topology"}


def test_the_teams_own_default_is_not_refused_as_a_users_choice() -> None:
    # data-science enforces `required` at layer-3: the policy's annotation is the team's own.
    (row,) = [r for r in KINDS if r.kind == "Job"]
    user = job()
    filled = as_the_policy_fills(user, row, _team("data-science"))
    assert filled["metadata"]["annotations"][FILLED_BY_POLICY] == "queue,priority,topology"
    assert _admitted(filled, "ds-sandbox") == _admitted(user, "ds-sandbox")


def test_an_update_of_a_filled_object_is_not_refused() -> None:
    (row,) = [r for r in KINDS if r.kind == "Job"]
    stored = as_the_policy_fills(job(), row, _team("data-science"))
    changed = copy.deepcopy(stored)
    changed["metadata"]["labels"]["team-note"] = "x"
    outcome = review(review_body(changed, "ds-sandbox", "UPDATE", stored), bundled_teams(), inventory=aws_nodes())
    assert outcome.plan.allowed and outcome.patch == []
