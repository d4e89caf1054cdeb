"""The planner's input: the parts of an AdmissionReview request that the rules read.

:mod:`webhook.core.admission.envelope` parses an ``AdmissionReview`` body into an
:class:`AdmissionRequest`; :mod:`webhook.core.plan.planner` plans from it. It lives here, below the
envelope, so that planning never imports the admission layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["AdmissionRequest"]


@dataclass(frozen=True)
class AdmissionRequest:
    """The parts of ``AdmissionReview.request`` the webhook uses.

    ``group``/``version``/``kind``: the resource kind (``request.kind``; group ``""`` for core).
    ``object``/``old_object``: the decoded objects (None when absent, e.g. ``object`` on DELETE).
    ``user``: ``request.userInfo.username``, who sends the request (None when the review carries no
    ``userInfo``; the API server always sends one).
    """

    review_api_version: str
    uid: str
    operation: str
    namespace: str
    group: str
    version: str
    kind: str
    name: str
    sub_resource: str
    object: dict[str, Any] | None
    old_object: dict[str, Any] | None
    dry_run: bool
    user: str | None = None

    @property
    def api_version(self) -> str:
        """``apiVersion`` of the object (``batch/v1``, ``v1`` for core kinds)."""
        return f"{self.group}/{self.version}" if self.group else self.version
