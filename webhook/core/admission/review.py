"""The admission path in one place: parse → resolve team → plan → patch → respond.

:func:`review` is what the HTTP server and ``kgov review`` both call, so the CLI answers exactly
what the server would. It performs no I/O: policies, namespace labels and nodes are passed in from
the caller's in-memory caches (SPEC §5: never an API call per request).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.core.admission.envelope import AdmissionRequest, build_response, parse_admission_review
from webhook.core.kueue.inventory import NodeInventory
from webhook.core.plan.patch import to_json_patch
from webhook.core.plan.planner import Plan, plan_admission
from webhook.core.platform.resolve import Resolution, TeamIndex

__all__ = ["MESSAGE_PREFIX", "ReviewOutcome", "review", "review_request"]

MESSAGE_PREFIX = "kueue-governor"


@dataclass
class ReviewOutcome:
    """Everything one review decided: the response plus what metrics and logs need."""

    request: AdmissionRequest
    resolution: Resolution
    plan: Plan
    patch: list[dict[str, Any]] = field(default_factory=list)
    response: dict[str, Any] = field(default_factory=dict)


def review_request(
    request: AdmissionRequest,
    teams: TeamIndex,
    namespace_labels: Callable[[str], Mapping[str, str] | None],
    inventory: NodeInventory | None = None,
    governor: str | None = None,
) -> ReviewOutcome:
    """Decide on a parsed request. ``namespace_labels(name)`` reads the namespace cache;
    ``governor``: the user the governor's topology widening runs as (None: none)."""
    labels = namespace_labels(request.namespace) if teams.needs_namespace_labels else None
    resolution = teams.resolve(request.namespace, labels)
    if resolution.conflict:
        plan = Plan()
        plan.report("enforce", "namespace", f"{resolution.reason}; fix the platform file so one team owns it")
    elif resolution.team is None:
        plan = Plan(skipped=resolution.reason)
    else:
        plan = plan_admission(request, resolution.team, inventory, teams.policies.controllers, governor)
    patch = to_json_patch(plan.changes) if plan.allowed else []
    if plan.allowed:
        response = build_response(request, allowed=True, patch=patch, warnings=_prefixed(plan.warnings))
    else:
        response = build_response(
            request,
            allowed=False,
            message="; ".join(_prefixed(plan.denials)),
            code=422 if plan.invalid else 403,
            warnings=_prefixed(plan.warnings),
        )
    return ReviewOutcome(request=request, resolution=resolution, plan=plan, patch=patch, response=response)


def review(
    body: Any,
    teams: TeamIndex,
    namespace_labels: Callable[[str], Mapping[str, str] | None] = lambda _: None,
    inventory: NodeInventory | None = None,
    governor: str | None = None,
) -> ReviewOutcome:
    """Parse a decoded AdmissionReview and decide on it (``governor``: :func:`review_request`).

    Raises:
        MalformedReview: the body is not an answerable AdmissionReview (HTTP 400).
    """
    return review_request(parse_admission_review(body), teams, namespace_labels, inventory, governor)


def _prefixed(messages: list[str]) -> list[str]:
    return [f"{MESSAGE_PREFIX}: {m}" for m in messages]
