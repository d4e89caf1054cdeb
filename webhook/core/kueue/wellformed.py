"""Values Kueue must be able to read: pod counts, resource quantities and the maps and lists on
the way to them.

The API server decodes a built-in kind into its Go type before it calls mutating webhooks, but a
custom resource (PyTorchJob, JobSet, RayJob…) reaches them before its schema is checked, and
``kgov mutate`` has no API server at all. So :mod:`webhook.core.kueue.view` reads every such value
through this module, and each one Kueue could not read (``replicas: "abc"``, ``parallelism: -3``,
``nvidia.com/gpu: "8Xi"``, ``containers: "notalist"``…) becomes a :class:`Problem` naming its path;
the planner refuses the object with them (a malformed object is denied whatever the enforcement,
HTTP 422), never counts it as something else.

Kubernetes sources: the int32 fields of the workload types (``replicas``, ``parallelism``,
``completions``, ``numOfHosts``…, ``+optional`` pointers: null is unset), ``resource.Quantity``
(``k8s.io/apimachinery/pkg/api/resource``: a JSON string or number of the quantity grammar) and
``ValidateResourceQuantityValue`` (requests, limits and overhead must be non-negative, and whole
numbers for an extended resource such as ``nvidia.com/gpu``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from webhook.core.objects.integers import decimal_int
from webhook.core.objects.jsonbody import json_type
from webhook.core.objects.paths import Key, PathPattern, dotted
from webhook.core.objects.quantity import MAX_QUANTITY, QuantityError, QuantityOutOfRange, parse_quantity

__all__ = [
    "INT32_MAX",
    "Problem",
    "Problems",
    "a_list",
    "a_map",
    "count",
    "describe",
    "expand_checked",
    "is_extended_resource",
    "maps_of",
    "missing_templates",
    "node_selector_term",
    "quantity",
    "required_terms",
    "string_values",
    "strings_at",
    "terms_of",
]

#: The largest value of the int32 count fields (Kubernetes ``int32``).
INT32_MAX = 2**31 - 1
#: Longest rendering of a value quoted in a message.
_SHOWN = 64
#: ``strconv.Atoi`` of a count kept in an annotation, without a sign that makes it negative.
_TEXT_COUNT = re.compile(r"\+?[0-9]+")
QUANTITY_EXAMPLES = "e.g. 8, 500m, 64Gi"
#: What a fractional JSON number in a custom resource that Kueue does not re-encode must be instead.
FRACTIONAL_NUMBER = (
    'a whole number or a quantity string (e.g. 8, "500m", "64Gi"): the CRD\'s int-or-string schema '
    "refuses a fractional JSON number, which Kueue's webhook re-encodes only in a workload submitted "
    "with a queue label"
)
#: ``IsQualifiedName`` (``k8s.io/apimachinery/pkg/util/validation``): the name part and the
#: DNS-1123 subdomain prefix, with their length limits.
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_QUALIFIED_NAME_MAX = 63
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_SUBDOMAIN_MAX = 253


@dataclass(frozen=True)
class Problem:
    """A value at ``path`` (keys from the object root) that is not ``expected`` (a phrase with
    its article: ``"an object"``, ``"a non-negative integer"``); ``missing``: no value is there
    (``found`` None) and one must be, ``expected`` then saying why."""

    path: tuple[Key, ...]
    found: Any
    expected: str
    missing: bool = False

    def message(self) -> str:
        """``spec.parallelism must be a non-negative integer, got number -3``; a missing value:
        ``metadata.annotations.x must be set: <why>``."""
        if self.missing:
            return f"{dotted(self.path)} must be set: {self.expected}"
        return f"{dotted(self.path)} must be {self.expected}, got {describe(self.found)}"


Problems = list[Problem]


def describe(value: Any) -> str:
    """A value's JSON type, and for a scalar its JSON text (cut at 64 characters):
    ``string "abc"``, ``number -7``, ``boolean true``, ``array``."""
    if isinstance(value, Mapping | list) or value is None:
        return json_type(value)
    text = json.dumps(value, ensure_ascii=False)
    if len(text) > _SHOWN:
        text = f"{text[: _SHOWN - 1]}…"
    return f"{json_type(value)} {text}"


def a_map(value: Any, path: tuple[Key, ...], problems: Problems) -> Mapping[str, Any]:
    """The map at ``path``; {} when unset (absent or null) or, with a problem recorded, not a map."""
    if type(value) is dict:  # exact dict and None first: the abc check is slow
        return value
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return value
    problems.append(Problem(path, value, "an object"))
    return {}


def a_list(value: Any, path: tuple[Key, ...], problems: Problems) -> list[Any]:
    """The list at ``path``; [] when unset or, with a problem recorded, not a list."""
    if isinstance(value, list):
        return value
    if value is not None:
        problems.append(Problem(path, value, "an array"))
    return []


def maps_of(value: Any, path: tuple[Key, ...], problems: Problems) -> list[tuple[tuple[Key, ...], Mapping[str, Any]]]:
    """The items of the list at ``path`` with their paths, each a map ([] when the list is unset);
    a list of another type, or an item that is no map (``null`` too), is a problem."""
    out: list[tuple[tuple[Key, ...], Mapping[str, Any]]] = []
    for index, item in enumerate(a_list(value, path, problems)):
        if type(item) is dict or isinstance(item, Mapping):
            out.append(((*path, index), item))
        else:
            problems.append(Problem((*path, index), item, "an object"))
    return out


def node_selector_term(term: Mapping[str, Any], path: tuple[Key, ...], problems: Problems) -> None:
    """One ``nodeSelectorTerms[]`` item (core/v1 NodeSelectorTerm) at ``path``: its
    ``matchExpressions`` and ``matchFields`` must be lists of maps (NodeSelectorRequirement) whose
    ``key`` and ``operator`` are strings and whose ``values`` is a list of strings, as the API
    server decodes them; each value of another type is a problem (the node affinity rule appends
    to ``matchExpressions``, and node eligibility reads every requirement)."""
    for field in ("matchExpressions", "matchFields"):
        for where, requirement in maps_of(term.get(field), (*path, field), problems):
            for name in ("key", "operator"):
                value = requirement.get(name)
                if value is not None and not isinstance(value, str):
                    problems.append(Problem((*where, name), value, "a string"))
            for index, value in enumerate(a_list(requirement.get("values"), (*where, "values"), problems)):
                if not isinstance(value, str):
                    problems.append(Problem((*where, "values", index), value, "a string"))


def string_values(value: Any, path: tuple[Key, ...], problems: Problems) -> None:
    """Labels or annotations (Kubernetes ``map[string]string``) at ``path``: each value that is not
    a string (``kueue.x-k8s.io/queue-name: 5``) is a problem, unless one is already recorded at its
    path (a count kept in an annotation has its own message). A map of another type is left to
    the readers of the map."""
    if value is None or not isinstance(value, Mapping):
        return
    reported: set[tuple[Key, ...]] | None = None
    for key, item in value.items():
        if type(item) is str or isinstance(item, str):
            continue
        if reported is None:
            reported = {problem.path for problem in problems}
        if (*path, key) not in reported:
            problems.append(Problem((*path, key), item, "a string"))


def strings_at(node: Any, patterns: tuple[PathPattern, ...], problems: Problems) -> None:
    """Each value at one of ``patterns`` (paths that may hold ``"*"``) that is set but is no string
    is a problem (``runPolicy.schedulingPolicy.priorityClass: 12``: a Go ``string`` field, which
    the API server's or Kueue's decoding refuses), and so is each container on the way that is not
    the one the next key needs (:func:`expand_checked`)."""
    for pattern in patterns:
        for path, _, value in expand_checked(node, pattern, problems):
            if value is not None and not isinstance(value, str):
                problems.append(Problem(path, value, "a string"))


def count(value: Any, path: tuple[Key, ...], problems: Problems, text: bool = False) -> int | None:
    """A count (replicas, parallelism…): an integer from 0 to :data:`INT32_MAX` (a whole number
    written ``2.0`` too); None when unset, or, with a problem recorded, malformed (a string, a
    fraction, a boolean, a negative number).

    ``text``: the count is kept in an annotation, a string Kueue parses with ``strconv.Atoi`` /
    ``ParseInt`` and refuses below 1 (``pod-group-total-count``, ``job-min-parallelism``,
    ``podset-slice-size``).
    """
    if value is None:
        return None
    if text:
        found = None
        if isinstance(value, str) and _TEXT_COUNT.fullmatch(value):
            found = decimal_int(value, "+")
            found = INT32_MAX + 1 if found is None else found  # beyond int64: out of range, as above int32
        if found is None or found < 1:
            problems.append(Problem(path, value, 'a string holding a positive integer (e.g. "4")'))
            return None
        number = found
    elif type(value) is int and value >= 0:
        number = value
    elif type(value) is float and value.is_integer() and value >= 0:
        # YAML `2.0`: kubectl sends it as the JSON number 2 (sigs.k8s.io/yaml), a CRD's schema takes it.
        number = int(value)
    else:
        problems.append(Problem(path, value, "a non-negative integer"))
        return None
    if number > INT32_MAX:
        problems.append(Problem(path, value, f"at most {INT32_MAX} (an int32)"))
        return None
    return number


def is_extended_resource(name: str) -> bool:
    """Kubernetes' ``IsExtendedResourceName`` (``pkg/apis/core/helper``): a resource name with a
    domain (a ``/``) that is not in ``kubernetes.io/`` (no ``kubernetes.io/`` anywhere in it), not
    starting with ``requests.``, and a qualified name once written ``requests.<name>`` (a DNS-1123
    subdomain prefix of at most 253 characters, a name part of at most 63). ``nvidia.com/gpu`` is
    one; ``cpu``, ``hugepages-2Mi`` and ``requests.nvidia.com/gpu`` are not."""
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    parts = f"requests.{name}".split("/")
    if len(parts) != 2:
        return False
    prefix, local = parts
    return (
        len(prefix) <= _SUBDOMAIN_MAX
        and _DNS1123_SUBDOMAIN.fullmatch(prefix) is not None
        and len(local) <= _QUALIFIED_NAME_MAX
        and _QUALIFIED_NAME.fullmatch(local) is not None
    )


def quantity(value: Any, path: tuple[Key, ...], problems: Problems, whole: bool = False) -> Decimal | None:
    """A resource quantity of requests, limits or overhead (``path`` ends with the resource name),
    in base units; None when unset or, with a problem recorded, not a non-negative Kubernetes
    quantity (``"8Xi"``, ``"-8"``, ``true``, ``"1e400"``: over 2^63-1), or not a whole number for an extended resource
    (``nvidia.com/gpu: "500m"``: Kubernetes' ``ValidateResourceQuantityValue`` refuses the pod).

    A fractional JSON number (``cpu: 0.5``) is a quantity, as ``resource.Quantity``'s JSON
    decoding takes it, unless ``whole``: a custom resource whose CRD schema types quantities
    int-or-string and that no Kueue webhook re-encodes first (:func:`webhook.core.kueue.view.kueue_reencodes`).
    """
    if value is None:
        return None
    try:
        amount = parse_quantity(value)
    except QuantityOutOfRange:
        expected = f"a Kubernetes quantity of at most 2^63-1 = {MAX_QUANTITY} (the largest Kubernetes represents)"
        problems.append(Problem(path, value, expected))
        return None
    except QuantityError:
        problems.append(Problem(path, value, f"a Kubernetes quantity ({QUANTITY_EXAMPLES})"))
        return None
    if amount < 0:
        problems.append(Problem(path, value, f"a non-negative quantity ({QUANTITY_EXAMPLES})"))
        return None
    name = path[-1] if path else None
    if isinstance(name, str) and amount != amount.to_integral_value() and is_extended_resource(name):
        expected = f"a whole number ({name} is an extended resource, which Kubernetes takes in whole units only)"
        problems.append(Problem(path, value, expected))
        return None
    if whole and type(value) is float and not value.is_integer():
        problems.append(Problem(path, value, FRACTIONAL_NUMBER))
        return None
    return amount


def expand_checked(
    node: Any, pattern: PathPattern, problems: Problems, keyed: bool = False, prefix: tuple[Key, ...] = ()
) -> Iterator[tuple[tuple[Key, ...], tuple[Key, ...], Any]]:
    """:func:`webhook.core.objects.paths.expand`, recording each value on the way that is set but is not
    the container the next key needs: a map for a name, a list for ``"*"`` (a map when ``keyed``:
    the items are keyed by role names, a Kubeflow job's replica specs)."""
    # The keys up to the next wildcard are followed in a loop, without a generator per key.
    for depth, head in enumerate(pattern):
        if node is None:
            return
        if head == "*":
            items: list[tuple[Key, Any]]
            if keyed:
                items = list(a_map(node, prefix, problems).items())
            else:
                items = list(enumerate(a_list(node, prefix, problems)))
            rest = pattern[depth + 1 :]
            for key, item in items:
                for path, bindings, value in expand_checked(item, rest, problems, keyed, (*prefix, key)):
                    yield path, (key, *bindings), value
            return
        holder = a_map(node, prefix, problems)
        if head not in holder:
            return
        node = holder[head]
        prefix = (*prefix, head)
    yield prefix, (), node


def missing_templates(node: Any, template: PathPattern, problems: Problems, keyed: bool = False) -> None:
    """Record each item of a list or map of roles (``template``'s last ``"*"``: a replica spec, a
    replicated job, a worker group) whose pod template below it is absent or null.

    Kueue builds such a podset from an empty pod template (the Kubeflow, JobSet and Ray
    integrations' ``PodSets()`` copy whatever the role holds), which the Workload's schema refuses
    (``podSets[].template.spec.containers`` is required), so Kueue never creates the Workload; the
    operators' own webhooks refuse the object too. A pattern without ``"*"`` is left to the API
    server (a Job without ``spec.template``) or is an optional template (a LeaderWorkerSet's
    ``leaderTemplate``). ``keyed``: the roles are a map (a Kubeflow job's replica specs)."""
    if "*" not in template:
        return
    cut = len(template) - template[::-1].index("*")
    role, rest = template[:cut], template[cut:]
    for path, _, item in expand_checked(node, role, [], keyed):  # its own problems: reported by the caller's walk
        value: Any = item
        for depth, key in enumerate(rest, 1):
            if not isinstance(value, Mapping):  # not a map: that problem is the caller's
                break
            value = value.get(key)
            if value is None:
                why = "the role's pods are built from it (Kueue never creates a Workload of an empty pod)"
                problems.append(Problem((*path, *rest[:depth]), None, why, missing=True))
                break


_REQUIRED = ("nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")


def required_terms(affinity: Any, at: tuple[Key, ...], problems: Problems) -> list[Any] | None:
    """The required ``nodeSelectorTerms`` (None when the pod has none), each map and list on the
    way checked."""
    node: Any = affinity
    for depth, key in enumerate(_REQUIRED):
        node = a_map(node, (*at, *_REQUIRED[:depth]), problems).get(key)
    for where, term in maps_of(node, (*at, *_REQUIRED), problems):
        node_selector_term(term, where, problems)
    return node if isinstance(node, list) else None


def terms_of(affinity: Any) -> list[Any] | None:
    """:func:`required_terms` of an affinity already found well-formed: the same value, without
    checking each map and list on the way again."""
    node = affinity
    for key in _REQUIRED:
        if type(node) is not dict and not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node if isinstance(node, list) else None
