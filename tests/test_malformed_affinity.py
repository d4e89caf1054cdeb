"""Malformed required node affinity: every ``nodeSelectorTerms[]`` requirement is read (node
eligibility) or appended to (the node affinity rule), so each item, key, operator and value of
another JSON type than core/v1 NodeSelectorRequirement's is refused by its path, all in one
answer (docs/rules.md, "Malformed objects"), through the recorded Job AdmissionReview."""

from __future__ import annotations

from typing import Any

from test_malformed import answer, assert_admitted

from webhook.core.objects.paths import dotted

TERMS = ("spec", "template", "spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")


def _job(terms: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "a", "namespace": "hyperpod-ns-research"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
                    "restartPolicy": "Never",
                    "affinity": {"nodeAffinity": {TERMS[-1]: {"nodeSelectorTerms": terms}}},
                }
            }
        },
    }


def test_each_malformed_requirement_is_refused_by_its_path() -> None:
    terms = [
        {"matchExpressions": [{"key": "a", "operator": "In", "values": 5}, 7, {"key": 3, "operator": True}]},
        {"matchFields": "x"},
        {"matchExpressions": [{"key": "b", "operator": "In", "values": ["x", 2]}]},
    ]
    outcome = answer(_job(terms))
    base = dotted((*TERMS, "nodeSelectorTerms"))
    assert outcome.response["response"]["allowed"] is False
    assert sorted(outcome.plan.denials) == sorted(
        [
            f"malformed object: {base}[0].matchExpressions[0].values must be an array, got number 5",
            f"malformed object: {base}[0].matchExpressions[1] must be an object, got number 7",
            f"malformed object: {base}[0].matchExpressions[2].key must be a string, got number 3",
            f"malformed object: {base}[0].matchExpressions[2].operator must be a string, got boolean true",
            f'malformed object: {base}[1].matchFields must be an array, got string "x"',
            f"malformed object: {base}[2].matchExpressions[0].values[1] must be a string, got number 2",
        ]
    )
    assert outcome.patch == []


def test_well_formed_requirements_are_admitted() -> None:
    terms = [
        {"matchExpressions": [{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "In", "values": ["x"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
    ]
    assert_admitted(answer(_job(terms)))
