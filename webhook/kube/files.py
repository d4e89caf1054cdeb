"""Reading the webhook's inputs from files (the offline side of the caches): policies, namespace and node dumps.

Policies come from either the platform file (compiled on load) or a PolicySet JSON document (the
``policy.json`` key of the generated ConfigMap, mounted as a file); a ConfigMap may carry the
platform file itself instead (key ``platform.yaml``, as the Helm chart writes it from its
``platformFile`` value), compiled as it is read. Namespace and node dumps are
``kubectl get namespaces -o json`` / ``kubectl get nodes -o json`` output (a ``List``), a single
object, or a YAML equivalent; any other document is refused.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from webhook.core.kueue.inventory import NodeInventory, allocatable_problem
from webhook.core.kueue.resources import pod_requests
from webhook.core.kueue.wellformed import Problems, a_map
from webhook.core.objects.jsonbody import dotted_path
from webhook.core.objects.paths import field_path
from webhook.core.platform.platform import PlatformError, load_platform, parse_platform_text
from webhook.core.platform.policy import PolicySet, compile_policies
from webhook.core.platform.yamlload import (
    DuplicateKeyError,
    YamlLimitError,
    limited,
    locate_duplicate,
    no_duplicate_pairs,
    yaml_error_line,
)

#: The key of the generated policy ConfigMap that holds the PolicySet JSON.
POLICY_KEY = "policy.json"
#: The key of a policy ConfigMap that holds the platform file itself (the chart's ``platformFile``).
PLATFORM_KEY = "platform.yaml"

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "PLATFORM_KEY",
    "POLICY_KEY",
    "InputError",
    "load_manifests",
    "load_namespace_labels",
    "load_nodes",
    "load_objects",
    "load_policies",
    "parse_policies",
    "read_document",
]


class InputError(ValueError):
    """A file given on the command line cannot be used; the message names it and says why."""


def read_document(path: str | Path) -> Any:
    """The one document of a YAML or JSON file (None when empty), read as :func:`load_manifests` does.

    Raises:
        InputError: unreadable, not UTF-8, not YAML/JSON, or more than one document.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    documents = load_manifests(text, str(path))
    if len(documents) > 1:
        raise InputError(f"{path}: expected one document, found {len(documents)}")
    return documents[0] if documents else None


def load_policies(
    platform: str | Path | None = None, policy: str | Path | None = None, extra_excluded: list[str] | None = None
) -> PolicySet:
    """A PolicySet from a platform file, or from a policy file: the PolicySet JSON, or the
    generated ``kgov-policy`` ConfigMap (YAML or JSON) whose ``data["policy.json"]`` holds it.

    Raises:
        PlatformError: invalid platform file (every problem with its path).
        InputError: neither or both sources given, an unreadable file, or an invalid policy file.
    """
    if (platform is None) == (policy is None):
        raise InputError("give exactly one of a platform file or a policy file")
    if platform is not None:
        return compile_policies(load_platform(platform), extra_excluded)
    assert policy is not None
    return parse_policies(read_document(policy), str(policy), extra_excluded)


def parse_policies(data: Any, where: str, extra_excluded: list[str] | None = None) -> PolicySet:
    """A PolicySet from a parsed document: the PolicySet JSON itself, or a ConfigMap (as
    ``kgov generate`` writes ``policy-configmap.yaml``, or as the API server returns it) whose
    ``data["policy.json"]`` holds it, or whose ``data["platform.yaml"]`` holds the platform file
    (compiled here, as ``kgov generate`` would: SPEC §8, the chart's ``platformFile``).
    ``extra_excluded`` namespaces are added to ``excludedNamespaces``. ``where`` names the source
    in messages (a file, ``ConfigMap ns/name``).

    Raises:
        InputError: a ConfigMap with neither key or both, a value that is not JSON, a document that
            is not a valid PolicySet, or a platform file that is not valid (every problem with its
            path).
    """
    if isinstance(data, dict) and data.get("kind") == "ConfigMap":
        entries: dict[str, Any] = data["data"] if isinstance(data.get("data"), dict) else {}
        if PLATFORM_KEY in entries:
            if POLICY_KEY in entries:
                raise InputError(f"{where}: the ConfigMap has both data[{POLICY_KEY!r}] and data[{PLATFORM_KEY!r}]")
            return _compile_platform_text(entries[PLATFORM_KEY], where, extra_excluded)
        text = entries.get(POLICY_KEY)
        if not isinstance(text, str):
            raise InputError(f"{where}: the ConfigMap has no data[{POLICY_KEY!r}] (nor data[{PLATFORM_KEY!r}])")
        try:
            data = json.loads(text, object_pairs_hook=no_duplicate_pairs)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: data[{POLICY_KEY!r}] is not JSON: {exc}") from None
        except DuplicateKeyError as exc:
            raise InputError(f"{where}: data[{POLICY_KEY!r}]: {locate_duplicate(text, exc)}") from None
        except RecursionError:
            raise InputError(f"{where}: data[{POLICY_KEY!r}] is nested too deeply") from None
    try:
        policies = PolicySet.model_validate(data)
    except ValidationError as exc:
        lines = "\n".join(
            f"  {field_path(err['loc']) or '<document>'}: {err['msg'].removeprefix('Value error, ')}"
            for err in exc.errors()
        )
        raise InputError(f"{where}: invalid policy file\n{lines}") from None
    if extra_excluded:
        merged = list(dict.fromkeys([*policies.excludedNamespaces, *extra_excluded]))
        policies = policies.model_copy(update={"excludedNamespaces": merged})
    return policies


def _compile_platform_text(text: Any, where: str, extra_excluded: list[str] | None) -> PolicySet:
    """The PolicySet of the platform file in a ConfigMap's ``data["platform.yaml"]``."""
    source = f"{where}: data[{PLATFORM_KEY!r}]"
    if not isinstance(text, str):
        raise InputError(f"{source} is not a string")
    try:
        return compile_policies(parse_platform_text(text, source), extra_excluded)
    except PlatformError as exc:
        raise InputError(str(exc)) from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _read_dump(path: str | Path) -> Any:
    """A ``kubectl -o json`` dump parsed as JSON (far faster than the YAML parser, same values);
    anything else, or JSON that does not parse or repeats a key, through :func:`read_document` and
    its messages (with line and column)."""
    try:
        with Path(path).open("rb") as handle:
            head = handle.read(64).lstrip()
        if head[:1] in (b"{", b"["):
            return json.loads(
                Path(path).read_bytes(), parse_constant=_refuse_constant, object_pairs_hook=no_duplicate_pairs
            )
    except (ValueError, RecursionError, OSError, DuplicateKeyError):
        pass  # the YAML reader says why, in the project's words
    return read_document(path)


def load_objects(path: str | Path, kind: str) -> list[dict[str, Any]]:
    """The objects of a ``kubectl get <kind>s -o json`` dump: a ``<kind>List`` or a ``List``
    (``items``, possibly empty), or one ``<kind>``. For Nodes, each ``status.allocatable`` amount
    must be a non-negative quantity (the API server's rule; a dump is not validated by one).

    Raises:
        InputError: unreadable, not YAML/JSON, any other document (a bare array, another kind),
            an item that is not a ``kind`` with metadata, a Node with an invalid allocatable, or a
            Pod with an invalid request, limit or overhead.
    """
    data = _read_dump(path)
    expected = f"expected `kubectl get {kind.lower()}s -o json` output (a {kind}List or List) or one {kind}"
    if not isinstance(data, dict):
        found = "an empty file" if data is None else _json_type(data)
        raise InputError(f"{path}: {expected}, got {found}")
    found_kind = data.get("kind")
    if found_kind in (f"{kind}List", "List") and isinstance(data.get("items"), list):
        items = data["items"]
    elif found_kind == kind:
        items = [data]
    else:
        got = f"kind {found_kind!r}" if isinstance(found_kind, str) else "an object without a kind"
        if found_kind in (f"{kind}List", "List"):
            got = f"a {found_kind} without an items array"
        raise InputError(f"{path}: {expected}, got {got}")
    for index, item in enumerate(items):
        where = f"the {kind}" if found_kind == kind else f"items[{index}]"
        if not isinstance(item, dict) or item.get("kind", kind) != kind:
            raise InputError(f"{path}: {where} is not a {kind}")
        if not isinstance(item.get("metadata"), dict):
            raise InputError(f"{path}: {where} has no metadata object")
        problem = allocatable_problem(item) if kind == "Node" else None
        if problem is not None:
            raise InputError(f"{path}: {where} (node {str(item['metadata'].get('name', ''))!r}): {problem}")
        problem = requests_problem(item) if kind == "Pod" else None
        if problem is not None:
            namespace, name = item["metadata"].get("namespace"), str(item["metadata"].get("name", ""))
            name = f"{namespace}/{name}" if namespace else name
            raise InputError(f"{path}: {where} (pod {name!r}): {problem}")
    return list(items)


def requests_problem(pod: dict[str, Any]) -> str | None:
    """What is wrong with a Pod's requests, limits and overhead (None: nothing), as Kueue's view
    reads them (:func:`webhook.core.kueue.resources.pod_requests`): each a non-negative Kubernetes
    quantity, whole for an extended resource, in maps and lists of the right type. For Pods read
    from a file, which no API server has validated; a malformed amount would count as 0."""
    problems: Problems = []
    pod_requests(a_map(pod.get("spec"), ("spec",), problems), problems, ("spec",))
    return problems[0].message() if problems else None


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "an array" if value else "an empty array"
    return {str: "a string", bool: "a boolean", int: "a number", float: "a number"}.get(type(value), "a value")


#: Largest manifest document accepted, as JSON (kube-apiserver takes at most 3 MiB per request).
MAX_DOCUMENT_BYTES = 8 * 1024 * 1024


class _KubeYAMLLoader(yaml.SafeLoader):
    """YAML as Kubernetes reads it: a timestamp such as ``2024-01-01`` and a base-60 number such as
    ``1:20`` (YAML 1.1 only) stay strings."""


_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
_KubeYAMLLoader.yaml_implicit_resolvers = {
    first: [
        (tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp" and tag not in _NUMBER_TAGS
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
# PyYAML's YAML 1.1 number patterns without their base-60 forms.
_KubeYAMLLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"),
    list("-+0123456789"),
)
_KubeYAMLLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)


_LIMITED_LOADER = limited(_KubeYAMLLoader)


def _as_json(document: Any, where: str) -> Any:
    """A JSON copy (no shared maps from YAML anchors), refusing what JSON and Kubernetes lack."""
    encoder = json.JSONEncoder(allow_nan=False)
    chunks: list[str] = []
    size = 0
    try:
        for chunk in encoder.iterencode(document):
            size += len(chunk)
            if size > MAX_DOCUMENT_BYTES:  # e.g. YAML aliases nested to expand exponentially
                raise InputError(f"{where} expands to more than {MAX_DOCUMENT_BYTES // 2**20} MiB of JSON")
            chunks.append(chunk)
    except TypeError:  # !!binary, !!set, …
        raise InputError(f"{where} holds a value JSON cannot carry (YAML binary data or a set)") from None
    except InputError:
        raise
    except ValueError as exc:  # NaN, .inf; or an alias inside its own anchor
        if str(exc).startswith("Circular reference"):
            raise InputError(
                f"{where} holds a recursive YAML alias (an anchor that refers to itself, such as `a: &a [*a]`)"
            ) from None
        raise InputError(f"{where} holds a number JSON cannot carry{_non_finite(document)}") from None
    return json.loads("".join(chunks))


def _non_finite(document: Any) -> str:
    """`` (infinity) at a.b[0]``: the first NaN or infinity of ``document`` (depth first, each map
    and list once) and its path; `` (NaN or infinity)`` if none is found."""
    stack: list[tuple[Any, list[str | int]]] = [(document, [])]
    visited: set[int] = set()
    while stack:
        value, path = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            name = "NaN" if math.isnan(value) else "infinity" if value > 0 else "-infinity"
            return f" ({name}) at {dotted_path(path)}" if path else f" ({name})"
        if isinstance(value, dict | list) and id(value) not in visited:
            visited.add(id(value))
            items = value.items() if isinstance(value, dict) else enumerate(value)
            stack.extend(
                (item, [*path, key if isinstance(key, int) and isinstance(value, list) else str(key)])
                for key, item in reversed(list(items))
            )
    return " (NaN or infinity)"


def load_manifests(text: str, source: str) -> list[Any]:
    """The documents of a YAML or JSON manifest stream (empty documents dropped), as JSON values.

    Raises:
        InputError: invalid YAML (invalid JSON, with its line and column, when ``source`` names a
            ``.json`` file), nesting too deep, or a document JSON cannot carry (NaN, binary, sets,
            a recursive alias) or that expands past :data:`MAX_DOCUMENT_BYTES`.
    """
    documents = []
    try:
        for index, document in enumerate(yaml.load_all(text, Loader=_LIMITED_LOADER), start=1):
            if document is not None:
                documents.append(_as_json(document, f"{source}: document {index}"))
    except yaml.YAMLError as exc:
        if source.lower().endswith(".json"):
            try:
                json.loads(text)
            except json.JSONDecodeError as json_exc:
                raise InputError(
                    f"{source}: not valid JSON: {json_exc.msg} at line {json_exc.lineno} column {json_exc.colno}"
                ) from None
        raise InputError(f"{source}: not valid YAML: {yaml_error_line(exc)}") from None
    except YamlLimitError as exc:
        raise InputError(f"{source}: {exc}") from None
    except RecursionError:  # none known under MAX_YAML_DEPTH; still one line, never a traceback
        raise InputError(f"{source}: nested too deeply") from None
    except InputError:
        raise
    except ValueError:  # Python's limit on converting integers of more than 4300 digits
        raise InputError(f"{source}: holds an integer too long to be a Kubernetes value") from None
    return documents


def load_namespace_labels(path: str | Path) -> dict[str, dict[str, str]]:
    """Namespace name → labels from a namespace dump.

    Raises:
        InputError: unreadable file or not a namespace list.
    """
    out: dict[str, dict[str, str]] = {}
    for item in load_objects(path, "Namespace"):
        metadata = item["metadata"]
        labels = metadata.get("labels")
        labels = labels if isinstance(labels, dict) else {}
        out[str(metadata.get("name", ""))] = {str(k): str(v) for k, v in labels.items()}
    return out


def load_nodes(path: str | Path) -> NodeInventory:
    """A node inventory from a node dump.

    Raises:
        InputError: unreadable file or not a node list.
    """
    return NodeInventory.from_objects(load_objects(path, "Node"))
