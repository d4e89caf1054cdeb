"""What Kueue refuses of a podset's TAS annotation values, whatever the team's policy (SPEC §3).

Kueue v0.19.2's ``ValidateTASPodSetRequest`` (``pkg/controller/jobframework/tas_validation.go``)
checks, besides what :mod:`webhook.core.plan.rules.kueue_tas` reads of the annotations' presence:

- the levels of ``podset-required-topology``, ``podset-preferred-topology`` and
  ``podset-slice-required-topology`` are label keys (``metavalidation.ValidateLabelName``: one
  error per reason Kubernetes' ``IsQualifiedName`` gives, :func:`label_key_errors`);
- ``podset-unconstrained-topology`` is what Go's ``strconv.ParseBool`` reads ("must be a boolean value"),
  and, under a release that refuses it (``KueueRelease.unconstrained_false_refused``, Kueue v0.20's
  ``TASRejectFalseUnconstrainedTopology``), not a false one;
- ``podset-slice-required-topology-constraints`` (multi-layer slices, feature gate
  ``TASMultiLayerTopology``, on by default since v0.19; ``validateSliceRequiredTopologyConstraintsAnnotation``):
  never next to ``podset-slice-required-topology`` or ``podset-slice-size`` (nor next to
  ``podset-group-name``: :mod:`.kueue_tas`'s finding); a JSON array as Go's ``encoding/json``
  decodes it into ``[]PodsetSliceRequiredTopologyConstraint`` (:func:`parse_layers`); 1 to 3
  layers; each layer's ``topology`` a label key and its ``size`` at least 1; no level twice; each
  size dividing its parent layer's.

``ValidateSliceSizeAnnotationUpperBound`` also bounds the first layer's size by the podset's
pods (:func:`first_layer_above`) and, under a release with partial slices, makes it divide them
when there is more than one layer (:func:`first_layer_remainder`). Kueue's Job webhook
(``pkg/controller/jobs/job/job_webhook.go``, ``validateTopologyRequest``) refuses required and
preferred topology on an elastic Job (:func:`elastic_errors`). The Workload CRD
(``apis/kueue/v1beta2/workload_types.go``) holds a level of at most 63 characters (``required``,
``preferred``, ``podSetSliceRequiredTopology``, a layer's ``topology``:
``+kubebuilder:validation:MaxLength=63``), though a label key may be longer: Kueue then never
creates the Workload (:func:`crd_errors`).

Each finding is ``(subject, value, message)``: the subject is the annotation key (with
``[i].topology`` or ``[i].size`` for a layer), the value the one refused (None: not shown),
the message Kueue's.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.core.kueue.versions import DEFAULT_KUEUE_VERSION, KueueRelease, kueue_release
from webhook.core.kueue.view import PREFERRED, REQUIRED, SLICE_CONSTRAINTS, SLICE_REQUIRED, SLICE_SIZE, UNCONSTRAINED
from webhook.core.objects.integers import decimal_int

__all__ = [
    "LAYERS_MAX",
    "LEVEL_MAX",
    "Finding",
    "Layer",
    "crd_errors",
    "elastic_errors",
    "first_layer_above",
    "first_layer_remainder",
    "label_key_errors",
    "layer_errors",
    "order_problems",
    "parse_bool",
    "parse_layers",
    "placed_levels",
    "value_errors",
]

#: Kueue v0.19.2's most slice layers (``errTopologyConstraintsLayerCount``, ``MaxItems=3``).
LAYERS_MAX = 3
#: The Workload CRD's longest level (``MaxLength=63`` on each topology level field).
LEVEL_MAX = 63

#: ``(subject, value, message)``; see the module.
Finding = tuple[str, Any, str]

_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_RULE = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
_SUBDOMAIN_RULE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_INT32 = re.compile(r"-?(0|[1-9][0-9]*)")


def label_key_errors(value: str) -> list[str]:
    """Kubernetes' reasons ``value`` is no label key (apimachinery v0.36 ``IsQualifiedName``, which
    Kueue's ``ValidateLabelName`` turns into one error each), [] for a label key. Lengths are
    bytes, as Go counts them; the regex hints Kubernetes appends are left out."""
    parts = value.split("/")
    if len(parts) > 2:
        return [
            f"a valid label key {_NAME_RULE} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    errors: list[str] = []
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            if len(prefix.encode()) > 253:
                errors.append("prefix part must be no more than 253 bytes")
            if not _SUBDOMAIN.fullmatch(prefix):
                errors.append(f"prefix part {_SUBDOMAIN_RULE}")
    if not name:
        errors.append("name part must be non-empty")
    elif len(name.encode()) > 63:
        errors.append("name part must be no more than 63 bytes")
    if not _NAME.fullmatch(name):
        errors.append(f"name part {_NAME_RULE}")
    return errors


def parse_bool(value: str) -> bool | None:
    """Go's ``strconv.ParseBool``: True, False, or None when it refuses ``value``."""
    return True if value in _TRUE else False if value in _FALSE else None


@dataclass(frozen=True)
class Layer:
    """One slice layer (``PodsetSliceRequiredTopologyConstraint``): ``size`` pods in one domain
    of level ``topology``; Go's zero values ("" and 0) for a field left out or null."""

    topology: str = ""
    size: int = 0


class _Number(str):
    """A JSON number's literal, kept as written (Go decodes it by its target's type)."""


class _Object(list[tuple[str, Any]]):
    """A JSON object's members in document order, duplicates kept (Go assigns each in turn)."""


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"invalid character {name[0]!r} looking for beginning of value")


def _kind(value: Any) -> str:
    if isinstance(value, _Object):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, _Number):
        return "number"
    return "string" if isinstance(value, str) else "bool"


def _layer(item: Any, index: int) -> Layer | str:
    if item is None:
        return Layer()  # null leaves the element at its zero value
    if not isinstance(item, _Object):
        return f"cannot unmarshal {_kind(item)} into layer {index}, an object"
    topology, size = "", 0
    for key, value in item:
        field = key.casefold()  # Go matches field names case-insensitively (bytes.EqualFold)
        if value is None or field not in ("topology", "size"):
            continue  # null is a no-op; other fields are ignored
        if field == "topology":
            if not isinstance(value, str) or isinstance(value, _Number):
                return f"cannot unmarshal {_kind(value)} into layer {index}'s topology, a string"
            topology = value
        elif (
            isinstance(value, _Number)
            and _INT32.fullmatch(value)
            and (number := decimal_int(value, "-")) is not None
            and -(2**31) <= number < 2**31
        ):
            size = number
        else:
            shown = value if isinstance(value, _Number) else _kind(value)
            return f"cannot unmarshal {shown} into layer {index}'s size, an int32"
    return Layer(topology, size)


@functools.lru_cache(maxsize=256)
def parse_layers(text: str) -> tuple[Layer, ...] | str:
    """``text`` as Go's ``json.Unmarshal`` reads it into ``[]PodsetSliceRequiredTopologyConstraint``
    (Kueue v0.19.2): the layers (``null`` is none), or why it fails: no JSON (NaN and Infinity
    are none), not an array, an element not an object or null, a ``topology`` not a string, a
    ``size`` not an integer literal within int32. Field names match case-insensitively, later
    members override earlier ones, other members are ignored. Cached: each podset's annotation
    is read by several rules."""
    try:
        document = json.loads(
            text, parse_int=_Number, parse_float=_Number, parse_constant=_refuse_constant, object_pairs_hook=_Object
        )
    except (ValueError, RecursionError) as exc:
        return f"not JSON ({exc})"
    if document is None:
        return ()
    if isinstance(document, _Object) or not isinstance(document, list):
        return f"cannot unmarshal {_kind(document)} into an array of layers"
    layers: list[Layer] = []
    for index, item in enumerate(document):
        layer = _layer(item, index)
        if isinstance(layer, str):
            return layer
        layers.append(layer)
    return tuple(layers)


def layer_errors(annotations: Mapping[str, Any]) -> list[Finding]:
    """Kueue's ``validateSliceRequiredTopologyConstraintsAnnotation`` findings on a podset's
    ``podset-slice-required-topology-constraints`` (none without it), but the one on
    ``podset-group-name`` next to it, which :mod:`.kueue_tas` makes."""
    text = annotations.get(SLICE_CONSTRAINTS)
    if not isinstance(text, str):
        return []
    out: list[Finding] = [
        (SLICE_CONSTRAINTS, None, f"may not be set when '{key}' is specified")
        for key in (SLICE_REQUIRED, SLICE_SIZE)
        if key in annotations
    ]
    layers = parse_layers(text)
    if isinstance(layers, str):
        return [*out, (SLICE_CONSTRAINTS, text, f"must be a valid JSON array: {layers}")]
    if not 1 <= len(layers) <= LAYERS_MAX:
        message = f"topology constraints must contain between 1 and {LAYERS_MAX} entries, got {len(layers)}"
        return [*out, (SLICE_CONSTRAINTS, text, message)]
    for index, layer in enumerate(layers):
        at = f"{SLICE_CONSTRAINTS}[{index}]"
        out.extend((f"{at}.topology", layer.topology, reason) for reason in label_key_errors(layer.topology))
        if layer.size < 1:
            out.append((f"{at}.size", layer.size, "must be greater than or equal to 1"))
    seen: dict[str, int] = {}
    for index, layer in enumerate(layers):
        if layer.topology in seen:
            message = f"Duplicate value: {layer.topology} (also at index {seen[layer.topology]})"
            out.append((f"{SLICE_CONSTRAINTS}[{index}].topology", None, message))
        else:
            seen[layer.topology] = index
    for index, (parent, layer) in enumerate(itertools.pairwise(layers), start=1):
        if layer.size > 0 and parent.size % layer.size:
            message = f"must evenly divide the parent layer size {parent.size}"
            out.append((f"{SLICE_CONSTRAINTS}[{index}].size", layer.size, message))
    return out


def value_errors(annotations: Mapping[str, Any], release: KueueRelease | None = None) -> list[Finding]:
    """Kueue's findings on the levels' names and the unconstrained flag of one podset (see the
    module), in Kueue's order, under ``release``'s rules (None: the default release,
    :data:`webhook.core.kueue.versions.DEFAULT_KUEUE_VERSION`)."""
    release = release or kueue_release(DEFAULT_KUEUE_VERSION)
    out: list[Finding] = []
    for key in (REQUIRED, PREFERRED, SLICE_REQUIRED):
        level = annotations.get(key)
        if isinstance(level, str):
            out.extend((key, level, reason) for reason in label_key_errors(level))
    flag = annotations.get(UNCONSTRAINED)
    if isinstance(flag, str) and parse_bool(flag) is None:
        out.append((UNCONSTRAINED, flag, "must be a boolean value"))
    elif isinstance(flag, str) and parse_bool(flag) is False and release.unconstrained_false_refused:
        message = "must not be false (leave the annotation out for no topology request)"
        out.append((UNCONSTRAINED, flag, message))
    return out


def first_layer_above(annotations: Mapping[str, Any], count: int) -> list[Finding]:
    """``ValidateSliceSizeAnnotationUpperBound`` on the layers: the first (outermost) layer's
    size (the finding's value) above the podset's ``count`` pods; [] when the layers do not parse."""
    text = annotations.get(SLICE_CONSTRAINTS)
    layers = parse_layers(text) if isinstance(text, str) else ()
    if isinstance(layers, str) or not layers or layers[0].size <= count:
        return []
    return [(SLICE_CONSTRAINTS, layers[0].size, f"must not be greater than pod set count {count}")]


def first_layer_remainder(annotations: Mapping[str, Any], count: int, release: KueueRelease) -> list[Finding]:
    """``ValidateSliceSizeAnnotationUpperBound`` under a release with partial slices
    (``release.partial_slices``, Kueue v0.20's ``TASPartialSlices``): only a single layer may leave a
    partial last slice, so with more than one layer the first (outermost) size, at most ``count``,
    must divide the podset's ``count`` pods ("must evenly divide pod set count N when more than
    one layer is specified"); [] otherwise, and when the layers do not parse."""
    text = annotations.get(SLICE_CONSTRAINTS)
    layers = parse_layers(text) if isinstance(text, str) and release.partial_slices else ()
    if isinstance(layers, str) or len(layers) < 2 or not 1 <= layers[0].size <= count:
        return []
    if count % layers[0].size == 0:
        return []
    message = f"must evenly divide pod set count {count} when more than one layer is specified"
    return [(SLICE_CONSTRAINTS, layers[0].size, message)]


def elastic_errors(annotations: Mapping[str, Any], forbidden: Sequence[str]) -> list[Finding]:
    """Kueue's Job webhook on an elastic Job (``forbidden``: what its kind refuses on an elastic
    workload, :func:`webhook.core.plan.rules.topology.elastic_forbidden`): required topology, else
    preferred, "is not supported with elastic jobs"."""
    for key, mode in ((REQUIRED, "required"), (PREFERRED, "preferred")):
        if key in forbidden and key in annotations:
            return [(key, annotations[key], f"{mode} topology is not supported with elastic jobs")]
    return []


def crd_errors(annotations: Mapping[str, Any]) -> list[Finding]:
    """The levels Kueue copies into its Workload (required, else preferred; the slice level with
    a slice size and no layers; each layer's) that the Workload CRD refuses: label keys longer
    than :data:`LEVEL_MAX` characters."""
    kept: list[tuple[str, Any]] = []
    mode = REQUIRED if REQUIRED in annotations else PREFERRED
    kept.append((mode, annotations.get(mode)))
    text = annotations.get(SLICE_CONSTRAINTS)
    if isinstance(text, str):
        layers = parse_layers(text)
        if not isinstance(layers, str):
            kept.extend((f"{SLICE_CONSTRAINTS}[{i}].topology", layer.topology) for i, layer in enumerate(layers))
    elif SLICE_SIZE in annotations:
        kept.append((SLICE_REQUIRED, annotations.get(SLICE_REQUIRED)))
    message = (
        f"must be at most {LEVEL_MAX} characters: Kueue copies it into its Workload, whose CRD refuses a "
        "longer level, so the Workload is never created"
    )
    return [
        (subject, level, message)
        for subject, level in kept
        if isinstance(level, str) and len(level) > LEVEL_MAX and not label_key_errors(level)
    ]


def _slice_layers(annotations: Mapping[str, Any]) -> list[tuple[str, Layer]]:
    """The slice layers Kueue's Workload gets, each with its subject: the multi-layer annotation's
    (when it parses), else ``podset-slice-required-topology`` with ``podset-slice-size``."""
    text = annotations.get(SLICE_CONSTRAINTS)
    if isinstance(text, str):
        layers = parse_layers(text)
        return [] if isinstance(layers, str) else [(f"{SLICE_CONSTRAINTS}[{i}]", x) for i, x in enumerate(layers)]
    level, size = annotations.get(SLICE_REQUIRED), annotations.get(SLICE_SIZE)
    if isinstance(level, str) and isinstance(size, str):
        return [(SLICE_REQUIRED, Layer(level, 0))]
    return []


def placed_levels(annotations: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Each level Kueue's TAS looks up in the flavor's Topology for a podset, with its subject
    (required, preferred, the slice level or each layer's topology), as written."""
    keys = (REQUIRED, PREFERRED, SLICE_REQUIRED)
    out = [(key, annotations[key]) for key in keys if isinstance(annotations.get(key), str)]
    text = annotations.get(SLICE_CONSTRAINTS)
    layers = parse_layers(text) if isinstance(text, str) else ()
    if not isinstance(layers, str) and len(layers) <= LAYERS_MAX:  # else Kueue's webhook refuses them
        out.extend((f"{SLICE_CONSTRAINTS}[{i}].topology", layer.topology) for i, layer in enumerate(layers))
    return out


def order_problems(annotations: Mapping[str, Any], levels: Sequence[str]) -> list[str]:
    """Where a podset's slice levels stand wrong against ``levels`` (the flavor's Topology,
    broadest first), as Kueue v0.19.2's TAS refuses at scheduling time, so never admits it
    (``TASFlavorSnapshot.findTopologyAssignment``, ``buildSliceSizeAtLevel``): the (first) slice
    level above the podset's required or preferred level ("podset slice topology … is above the
    podset topology …"; slices alone are placed at the broadest level), an inner layer not below
    the layer before it. Levels not in ``levels`` are left to the caller."""
    layers = _slice_layers(annotations)
    if not layers or any(layer.topology not in levels for _, layer in layers):
        return []
    mode = next((key for key in (REQUIRED, PREFERRED) if isinstance(annotations.get(key), str)), None)
    top = annotations[mode] if mode is not None else levels[0]
    if top not in levels:
        return []
    subject, first = layers[0]
    where = subject if subject == SLICE_REQUIRED else f"{subject}.topology"
    if levels.index(first.topology) < levels.index(top):
        return [
            f"{where} {first.topology!r} is above {mode} {top!r}: Kueue's TAS places slices within the podset's "
            f'domain ("podset slice topology {first.topology} is above the podset topology {top}")'
        ]
    out: list[str] = []
    for (_, parent), (subject, layer) in itertools.pairwise(layers):
        if levels.index(layer.topology) <= levels.index(parent.topology):
            out.append(
                f"{subject}.topology {layer.topology!r} must be a level below {parent.topology!r}, the layer "
                f'before it ("additional slice layer topology {layer.topology} must be at a lower level than '
                f'{parent.topology}")'
            )
    return out
