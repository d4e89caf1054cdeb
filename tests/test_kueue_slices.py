"""What Kueue v0.19.2 refuses of TAS annotation values, whatever the team's policy
(:mod:`webhook.core.plan.rules.kueue_slices`): multi-layer slices as Go's ``encoding/json`` reads them,
level names as Kubernetes' ``IsQualifiedName`` does, the unconstrained flag as ``strconv.ParseBool``
does; each a finding in every team namespace, with one message whatever the team's topology rule."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support import AWS_LEVELS, job, platform_with, review_body, teams_from

from webhook.core.admission.review import ReviewOutcome, review
from webhook.core.plan.rules.kueue_slices import (
    Layer,
    crd_errors,
    label_key_errors,
    layer_errors,
    order_problems,
    parse_bool,
    parse_layers,
)

K = "kueue.x-k8s.io/"
REQUIRED, PREFERRED, UNCONSTRAINED = (
    f"{K}podset-required-topology",
    f"{K}podset-preferred-topology",
    f"{K}podset-unconstrained-topology",
)
SLICE_LEVEL, SLICE_SIZE = f"{K}podset-slice-required-topology", f"{K}podset-slice-size"
LAYERS = f"{K}podset-slice-required-topology-constraints"
SPINE, BLOCK, RACK, HOST = AWS_LEVELS
REQUEST = "(Kueue v0.19.2 ValidateTASPodSetRequest); Kueue refuses the workload"


@pytest.mark.parametrize(
    ("text", "layers"),
    [
        ("null", []),
        (" [ ] ", []),
        ('[{"topology": "a", "size": 2}]', [Layer("a", 2)]),
        ('[{"Topology": "a", "SIZE": 2}]', [Layer("a", 2)]),  # Go matches field names case-insensitively
        ('[{"topology": "a", "ſize": 2}]', [Layer("a", 2)]),  # ... with Unicode simple folding (ſ is s)
        ("[null]", [Layer()]),
        ('[{"size": 2, "size": null}]', [Layer("", 2)]),  # null is a no-op, even after a value
        ('[{"size": 2, "Size": 3}]', [Layer("", 3)]),  # the later member wins
        ('[{"size": -0, "other": [1, {"x": null}]}]', [Layer("", 0)]),  # other members are ignored
        ('[{"size": 2147483647}]', [Layer("", 2**31 - 1)]),
    ],
)
def test_layers_are_read_as_gos_json_unmarshal_reads_them(text: str, layers: list[Layer]) -> None:
    assert parse_layers(text) == tuple(layers)


@pytest.mark.parametrize(
    "text",
    [
        "invalid-json",
        "",
        "[NaN]",
        '[{"size": Infinity}]',
        '[{"topology": "a", "size": 2.0}]',
        '[{"size": 1e1}]',
        '[{"size": "2"}]',
        '[{"size": 2147483648}]',
        '[{"size": true}]',
        '[{"topology": 3}]',
        '[{"topology": ["a"]}]',
        "[1]",
        '["a"]',
        '{"topology": "a", "size": 2}',
        '"[]"',
        "[] []",
    ],
)
def test_what_go_cannot_unmarshal_is_refused(text: str) -> None:
    assert isinstance(parse_layers(text), str)
    (finding,) = layer_errors({LAYERS: text})
    assert finding[0] == LAYERS and finding[2].startswith("must be a valid JSON array: ")


@pytest.mark.parametrize(
    ("level", "errors"),
    [
        (RACK, 0),
        ("rack", 0),
        ("some required value", 1),
        ("/", 3),  # empty prefix, empty name, name no label name
        ("a/b/c", 1),
        ("Example.com/rack", 1),  # a prefix is a lower-case DNS subdomain
        ("example.com/" + "r" * 64, 1),
        ("r" * 63, 0),
        ("é" * 32, 2),  # 64 bytes, as Go counts, and not alphanumeric ASCII
        ("rack\n", 1),  # Go's $ is the end of the text
    ],
)
def test_level_names_are_label_keys_as_kubernetes_counts_their_errors(level: str, errors: int) -> None:
    assert len(label_key_errors(level)) == errors


@pytest.mark.parametrize(
    ("value", "read"),
    [("true", True), ("True", True), ("1", True), ("F", False), ("yes", None), ("", None), (" true", None)],
)
def test_the_unconstrained_flag_is_read_as_go_parses_a_bool(value: str, read: bool | None) -> None:
    assert parse_bool(value) is read


def layers(*pairs: tuple[str, int]) -> str:
    return json.dumps([{"topology": level, "size": size} for level, size in pairs])


def test_each_layer_is_checked_and_every_problem_named() -> None:
    found = layer_errors({LAYERS: layers(("", 0), (RACK, -2), (RACK, 3)), SLICE_SIZE: "2"})
    assert [(subject, message.split(" (")[0]) for subject, _, message in found] == [
        (LAYERS, f"may not be set when '{SLICE_SIZE}' is specified"),
        (f"{LAYERS}[0].topology", "name part must be non-empty"),
        (
            f"{LAYERS}[0].topology",
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
            "alphanumeric character",
        ),
        (f"{LAYERS}[0].size", "must be greater than or equal to 1"),
        (f"{LAYERS}[1].size", "must be greater than or equal to 1"),
        (f"{LAYERS}[2].topology", f"Duplicate value: {RACK}"),
        (f"{LAYERS}[2].size", "must evenly divide the parent layer size -2"),
    ]
    # a layer of size 0 or less divides nothing (Kueue checks only positive children)
    assert layer_errors({LAYERS: layers((BLOCK, 4), (RACK, 0))})[-1][0] == f"{LAYERS}[1].size"
    assert len(layer_errors({LAYERS: layers((BLOCK, 4), (RACK, 0))})) == 1


def test_the_workload_crd_refuses_a_level_longer_than_63_characters() -> None:
    long = "a-very-long-prefix-for-a-topology-label.example.com/rack-of-the-cluster"
    assert not label_key_errors(long) and len(long) > 63
    assert [s for s, _, _ in crd_errors({REQUIRED: long})] == [REQUIRED]
    assert [s for s, _, _ in crd_errors({REQUIRED: RACK, LAYERS: layers((long, 2))})] == [f"{LAYERS}[0].topology"]
    assert [s for s, _, _ in crd_errors({SLICE_LEVEL: long, SLICE_SIZE: "2"})] == [SLICE_LEVEL]
    assert crd_errors({PREFERRED: long, REQUIRED: RACK}) == []  # Kueue keeps required only


def test_slice_levels_must_stand_below_the_podsets_level() -> None:
    assert order_problems({REQUIRED: RACK, LAYERS: layers((BLOCK, 4))}, AWS_LEVELS) == [
        f"{LAYERS}[0].topology {BLOCK!r} is above {REQUIRED} {RACK!r}: Kueue's TAS places slices within the "
        f'podset\'s domain ("podset slice topology {BLOCK} is above the podset topology {RACK}")'
    ]
    assert len(order_problems({PREFERRED: HOST, SLICE_LEVEL: SPINE, SLICE_SIZE: "2"}, AWS_LEVELS)) == 1
    assert order_problems({REQUIRED: BLOCK, LAYERS: layers((RACK, 4), (RACK + "x", 2))}, AWS_LEVELS) == []
    inner = order_problems({REQUIRED: SPINE, LAYERS: layers((RACK, 4), (BLOCK, 2))}, AWS_LEVELS)
    assert [p.split(" must")[0] for p in inner] == [f"{LAYERS}[1].topology {BLOCK!r}"]
    assert order_problems({LAYERS: layers((SPINE, 4), (HOST, 2))}, AWS_LEVELS) == []  # slices alone: the top


# -- in a review: every team, one message ------------------------------------------------------
NO_RULE_ENFORCE = {"queue": {"enforcement": "enforce"}}
NO_RULE_WARN = {"queue": {"enforcement": "warn"}}


def topology(enforcement: str, level: str = RACK) -> dict[str, Any]:
    return {"queue": {}, "topology": {"mode": "required", "level": level, "enforcement": enforcement}}


def run(
    annotations: dict[str, str], pol: dict[str, Any], parallelism: int = 4, old: dict[str, Any] | None = None
) -> ReviewOutcome:
    obj = job(
        spec={
            "parallelism": parallelism,
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {
                    "containers": [{"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]
                },
            },
        }
    )
    operation = "CREATE" if old is None else "UPDATE"
    return review(review_body(obj, "ml", operation=operation, old=old), teams_from(platform_with(pol)))


BAD = {
    "invalid-json": (
        {REQUIRED: RACK, LAYERS: "[{topology: rack}]"},
        f"podset 'main': {LAYERS} '[{{topology: rack}}]': must be a valid JSON array: ",
    ),
    "four-layers": (
        {REQUIRED: SPINE, LAYERS: layers((BLOCK, 4), (RACK, 2), (HOST, 1), ("gpu", 1))},
        "topology constraints must contain between 1 and 3 entries, got 4",
    ),
    "indivisible": (
        {REQUIRED: BLOCK, LAYERS: layers((RACK, 4), (HOST, 3))},
        f"podset 'main': {LAYERS}[1].size 3: must evenly divide the parent layer size 4 {REQUEST}",
    ),
    "above-the-pods": (
        {REQUIRED: BLOCK, LAYERS: layers((RACK, 8))},
        f"podset 'main': {LAYERS} 8: must not be greater than pod set count 4 "
        "(Kueue v0.19.2 ValidateSliceSizeAnnotationUpperBound); Kueue refuses the workload",
    ),
    "level-no-label-key": (
        {REQUIRED: "rack level"},
        f"podset 'main': {REQUIRED} 'rack level': name part must consist of",
    ),
    "unconstrained-yes": (
        {UNCONSTRAINED: "yes"},
        f"podset 'main': {UNCONSTRAINED} 'yes': must be a boolean value {REQUEST}",
    ),
}


@pytest.mark.parametrize(("annotations", "start"), BAD.values(), ids=BAD.keys())
@pytest.mark.parametrize(
    ("pol", "denied"),
    [
        (NO_RULE_ENFORCE, True),
        (NO_RULE_WARN, False),
        (topology("enforce"), True),
        (topology("warn"), False),
        (topology("default"), False),
    ],
    ids=["no-rule-enforce", "no-rule-warn", "enforce", "warn", "default"],
)
def test_what_kueue_refuses_is_found_for_every_team_with_one_message(
    annotations: dict[str, str], start: str, pol: dict[str, Any], denied: bool
) -> None:
    """Defect: these passed in silence for a team without a topology rule (and, but for a level
    outside the team's Topology, under ``default``), though Kueue v0.19.2 refuses them everywhere."""
    outcome = run(annotations, pol)
    assert outcome.plan.allowed is not denied
    said = outcome.plan.denials if denied else outcome.plan.warnings
    found = [f for f in said if f.startswith(f"topology: {start}") or (start in f and "Kueue v0.19.2" in f)]
    assert len(found) == 1, said
    assert found[0].endswith("Kueue refuses the workload")
    # the message is the same whatever the rule
    again = run(annotations, NO_RULE_ENFORCE)
    assert found[0] in again.plan.denials


def test_valid_layers_pass_and_the_topology_rule_adds_nothing_to_them() -> None:
    annotations = {REQUIRED: BLOCK, LAYERS: layers((RACK, 4), (HOST, 2))}
    for pol in (NO_RULE_ENFORCE, topology("enforce", BLOCK), topology("default")):
        outcome = run(annotations, pol, parallelism=8)
        assert outcome.plan.allowed and outcome.plan.warnings == [], outcome.plan.warnings
        assert not [op for op in outcome.patch if "topology" in op["path"]]


def test_a_layer_outside_the_teams_topology_or_above_its_level_is_never_admitted() -> None:
    outcome = run({REQUIRED: BLOCK, LAYERS: layers(("rack", 4))}, topology("enforce"), parallelism=8)
    assert outcome.plan.denials == [
        f"topology: {LAYERS}[0].topology 'rack' (podset 'main') is not a level of Topology 'aws' for team 'ml'; "
        f"allowed: {', '.join(AWS_LEVELS)}"
    ]
    outcome = run({REQUIRED: RACK, LAYERS: layers((BLOCK, 4))}, topology("default"), parallelism=8)
    assert outcome.plan.allowed
    assert [w.split(":")[1] for w in outcome.plan.warnings] == [" podset 'main'"]
    assert outcome.plan.warnings[0].endswith("; Kueue can never admit the workload")


def test_an_update_that_sets_layers_kueue_refuses_is_warned() -> None:
    stored = job(
        spec={
            "parallelism": 4,
            "suspend": True,
            "template": {
                "spec": {
                    "containers": [{"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]
                }
            },
        }
    )
    outcome = run({REQUIRED: BLOCK, LAYERS: "[]"}, NO_RULE_ENFORCE, old=stored)
    assert outcome.plan.allowed
    assert [w for w in outcome.plan.warnings if LAYERS in w and "between 1 and 3 entries" in w]


LONG = "a-very-long-prefix-for-a-topology-label.example.com/rack-of-the-cluster"


def test_a_level_longer_than_the_workload_holds_is_refused_for_every_team() -> None:
    """A label key of 71 characters passes Kueue's webhook, but Kueue's Workload holds a level of
    at most 63 (``maxLength``): Kueue never creates the Workload (e2e: test_kueue_tas_values)."""
    finding = (
        f"topology: podset 'main': {REQUIRED} {LONG!r}: must be at most 63 characters: Kueue copies it into its "
        "Workload, whose CRD refuses a longer level, so the Workload is never created "
        "(Kueue v0.19.2 Workload CRD topology level maxLength); Kueue refuses the workload"
    )
    assert run({REQUIRED: LONG}, NO_RULE_ENFORCE).plan.denials == [finding]
    assert run({REQUIRED: LONG}, NO_RULE_WARN).plan.warnings == [finding]
    assert run({REQUIRED: LONG[-63:]}, NO_RULE_ENFORCE).plan.denials == []


def test_layers_kueues_webhook_refuses_get_its_finding_only() -> None:
    """A level named twice is Kueue's webhook's finding; the order of the same layers (an inner
    layer not below its parent) is not said again, nor is less locality than the policy."""
    outcome = run({REQUIRED: BLOCK, LAYERS: layers((HOST, 2), (HOST, 1))}, topology("enforce"), parallelism=8)
    assert [d.split(": ")[2] for d in outcome.plan.denials] == [f"{LAYERS}[1].topology"]
    assert "Duplicate value" in outcome.plan.denials[0]
