"""AdmissionReview in and out (``admission.k8s.io/v1`` and ``v1beta1``).

:func:`parse_admission_review` turns a decoded request body into an :class:`AdmissionRequest` or
raises :class:`MalformedReview` with a precise reason (the server answers HTTP 400 with it).
:func:`build_response` makes the AdmissionReview answer: it echoes ``apiVersion``, ``kind`` and
``uid``, and carries ``patchType: JSONPatch`` with a base64 patch only when there is a change
(Kubernetes docs, "Dynamic Admission Control", webhook response).
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from webhook.core.kueue.kinds import find_kind
from webhook.core.objects.jsonbody import JSON_TYPES, MAX_DEPTH, BodyError, decode_json, json_type
from webhook.core.plan.request import AdmissionRequest

__all__ = [
    "ECHO_LIMIT",
    "MAX_DEPTH",
    "SUPPORTED_VERSIONS",
    "UID_LIMIT",
    "AdmissionRequest",
    "MalformedReview",
    "build_response",
    "clip",
    "create_review",
    "decode_body",
    "json_bytes",
    "json_type",
    "parse_admission_review",
]

SUPPORTED_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
_OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
#: Longest message (denial, warning, 400 reason) sent back, in characters: user values echoed in
#: it (a 7 MiB label value, apiVersion or name) are cut in the middle with a marker.
ECHO_LIMIT = 2048
#: Longest ``request.uid`` answered: the API server sends a UUID (36 characters), and the uid is
#: echoed verbatim, so a longer one is refused rather than sent back.
UID_LIMIT = 128


def clip(text: str, limit: int = ECHO_LIMIT) -> str:
    """``text`` if at most ``limit`` characters, else its head and tail around a marker
    ``…[N characters cut]…``, ``limit`` characters in all (so a message's rule name and its
    ``allowed: …`` tail both survive a huge value in the middle)."""
    if len(text) <= limit:
        return text
    keep = limit
    for _ in range(3):  # the marker's length depends on the count it shows
        marker = f"…[{len(text) - keep} characters cut]…"
        keep = max(limit - len(marker), 0)
    tail = keep // 2
    return f"{text[: keep - tail]}{marker}{text[len(text) - tail :] if tail else ''}"


class MalformedReview(ValueError):
    """The body is not an AdmissionReview we can answer; the message says exactly why (at most
    :data:`ECHO_LIMIT` characters: see :func:`clip`)."""

    def __init__(self, message: str) -> None:
        super().__init__(clip(message))


def _field(mapping: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str, required: bool) -> Any:
    value = mapping.get(key)
    if value is None:
        if required:
            raise MalformedReview(f"{where}.{key} is missing")
        return None
    if not isinstance(value, kind):
        wanted = JSON_TYPES[kind] if isinstance(kind, type) else " or ".join(JSON_TYPES[k] for k in kind)
        article = "an" if wanted[0] in "aeiou" else "a"
        raise MalformedReview(f"{where}.{key} must be {article} {wanted}, got {json_type(value)}")
    return value


#: Maps every ASCII digit to ``0`` and every other byte to a space: a run of 20 ``0`` in a body so
#: mapped is a number of 20 digits or more, which orjson would read as a float when it is an
#: integer beyond 64 bits (the standard library reads it exactly).
_DIGITS = bytes(48 if 48 <= byte <= 57 else 32 for byte in range(256))
_LONG_NUMBER = b"0" * 20


def decode_body(raw: bytes | str) -> Any:
    """Decode a request body as strict JSON (:func:`webhook.core.objects.jsonbody.decode_json`: RFC 8259,
    UTF-8, no NaN/Infinity, no lone surrogate, at most :data:`MAX_DEPTH` levels deep).

    orjson decodes it when it can (about three times as fast): a body with at most :data:`MAX_DEPTH`
    opening brackets in all (so it cannot nest deeper) and no run of 20 digits or more (orjson reads
    an integer beyond 64 bits as a float). Any other body, and one orjson refuses, goes to
    :func:`~webhook.core.objects.jsonbody.decode_json`, which gives the same values for every body orjson
    takes and says precisely why a body is not JSON.

    Raises:
        MalformedReview: what is wrong with the body, and where (byte, line and column, or path).
    """
    if (
        isinstance(raw, bytes)
        and raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH
        and _LONG_NUMBER not in raw.translate(_DIGITS)
    ):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # the standard library's decoder tells why, or reads it
    try:
        return decode_json(raw)
    except BodyError as exc:
        raise MalformedReview(str(exc)) from None


def parse_admission_review(body: Any) -> AdmissionRequest:
    """Validate a decoded AdmissionReview and return its request.

    Raises:
        MalformedReview: not an object, unknown ``apiVersion``/``kind``, missing ``request``,
            ``uid``, ``operation`` or ``kind``, or a field of the wrong JSON type.
    """
    if not isinstance(body, dict):
        raise MalformedReview(f"body must be a JSON object (an AdmissionReview), got {json_type(body)}")
    api_version = body.get("apiVersion")
    if api_version not in SUPPORTED_VERSIONS:
        raise MalformedReview(f"apiVersion must be one of {', '.join(SUPPORTED_VERSIONS)}, got {api_version!r}")
    if body.get("kind") != "AdmissionReview":
        raise MalformedReview(f"kind must be 'AdmissionReview', got {body.get('kind')!r}")
    request = _field(body, "request", dict, "AdmissionReview", required=True)
    uid = _field(request, "uid", str, "request", required=True)
    if not uid:
        raise MalformedReview("request.uid is empty")
    if len(uid) > UID_LIMIT:
        raise MalformedReview(f"request.uid is {len(uid)} characters long; at most {UID_LIMIT} are answered")
    operation = _field(request, "operation", str, "request", required=True)
    if operation not in _OPERATIONS:
        raise MalformedReview(f"request.operation must be one of {', '.join(_OPERATIONS)}, got {operation!r}")
    gvk = _field(request, "kind", dict, "request", required=True)
    kind = _field(gvk, "kind", str, "request.kind", required=True)
    group = _field(gvk, "group", str, "request.kind", required=False) or ""
    version = _field(gvk, "version", str, "request.kind", required=True)
    obj = _field(request, "object", dict, "request", required=operation in ("CREATE", "UPDATE"))
    old = _field(request, "oldObject", dict, "request", required=operation == "UPDATE")
    user_info = _field(request, "userInfo", dict, "request", required=False)
    user = _field(user_info, "username", str, "request.userInfo", required=False) if user_info else None
    for name, value in (("object", obj), ("oldObject", old)):
        if value is not None:
            metadata = value.get("metadata")
            if metadata is not None and not isinstance(metadata, dict):
                raise MalformedReview(f"request.{name}.metadata must be an object, got {json_type(metadata)}")
    return AdmissionRequest(
        review_api_version=api_version,
        uid=uid,
        operation=operation,
        namespace=_field(request, "namespace", str, "request", required=False) or "",
        group=group,
        version=version,
        kind=kind,
        name=_field(request, "name", str, "request", required=False) or "",
        sub_resource=_field(request, "subResource", str, "request", required=False) or "",
        object=obj,
        old_object=old,
        dry_run=bool(_field(request, "dryRun", bool, "request", required=False)),
        user=user,
    )


def json_bytes(value: Any) -> bytes:
    """``value`` as compact JSON in UTF-8 (orjson; the standard library's encoder, with ``\\u``
    escapes, for what orjson refuses: a string holding a lone surrogate, an integer beyond 64 bits).

    Raises:
        TypeError: ``value`` holds something that is not JSON (a Decimal, a set…).
    """
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":")).encode()


#: metav1.StatusReason of the codes a denial carries (403 policy, 422 invalid object, 503 retry later).
_STATUS_REASONS = {403: "Forbidden", 422: "Invalid", 503: "ServiceUnavailable"}


def build_response(
    request: AdmissionRequest,
    *,
    allowed: bool,
    patch: Sequence[Mapping[str, Any]] = (),
    message: str = "",
    code: int | None = None,
    warnings: Sequence[str] = (),
) -> dict[str, Any]:
    """The AdmissionReview answer for ``request``.

    ``patch``: RFC 6902 operations; encoded as base64 JSON with ``patchType: JSONPatch`` only when
    non-empty and ``allowed``. ``message``/``code``: ``response.status`` (a denial's reason and
    HTTP code, 403 by default). ``warnings``: shown by kubectl as ``Warning: …``. The message and
    each warning are cut to :data:`ECHO_LIMIT` characters (:func:`clip`).
    """
    response: dict[str, Any] = {"uid": request.uid, "allowed": allowed}
    message = clip(message)
    if allowed and patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json_bytes(list(patch))).decode()
    if not allowed or message:
        status: dict[str, Any] = {"message": message}
        if not allowed:
            status["code"] = code or 403
            status["reason"] = _STATUS_REASONS.get(code or 403, "Invalid")
        response["status"] = status
    if warnings:
        response["warnings"] = [clip(warning) for warning in warnings]
    return {"apiVersion": request.review_api_version, "kind": "AdmissionReview", "response": response}


def create_review(obj: Mapping[str, Any], namespace: str, user: str | None = None) -> dict[str, Any]:
    """The ``admission.k8s.io/v1`` AdmissionReview the API server would send for a dry-run CREATE of
    ``obj`` in ``namespace`` (the offline commands' way into :func:`webhook.core.admission.review.review`).

    ``request.resource`` is the kinds table's resource for the object's kind ("" for a kind it does
    not have); ``userInfo`` is left out unless ``user`` is given (a review without it trusts its
    sender, as :func:`webhook.core.plan.owners.made_by_a_controller` says).
    """
    api_version = str(obj.get("apiVersion", ""))
    group, _, version = api_version.rpartition("/")
    kind = str(obj.get("kind", ""))
    row = find_kind(api_version, kind)
    metadata = obj.get("metadata")
    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": row.resource if row else ""},
        "operation": "CREATE",
        "namespace": namespace,
        "name": str(metadata.get("name") or "") if isinstance(metadata, Mapping) else "",
        "object": obj,
        "dryRun": True,
    }
    if user is not None:
        request["userInfo"] = {"username": user}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
