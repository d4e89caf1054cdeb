"""Children of a Kueue-managed owner: which objects the owner's Workload covers, and who may make them.

Kueue leaves an object whose controller owner it manages as a workload (the Jobs of a JobSet, the
Pods of a Job) to the owner's Workload; the planner gives such a child nothing. Only a controller
may make an object such a child (:func:`user_made_child`), or a forged ``ownerReference`` would run
a workload outside the team's queue.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from webhook.core.kueue.kinds import is_managed_owner
from webhook.core.plan.request import AdmissionRequest
from webhook.core.platform.controllers import is_controller
from webhook.core.platform.policy import TeamPolicyCompiled

__all__ = ["made_by_a_controller", "managed_child", "managed_owner", "user_made_child"]


def managed_owner(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The controller ``ownerReference`` of ``obj`` that Kueue manages as the workload, or None."""
    metadata = obj.get("metadata")
    owners = metadata.get("ownerReferences") if isinstance(metadata, Mapping) else None
    for owner in owners if isinstance(owners, list) else []:
        if isinstance(owner, Mapping) and owner.get("controller") is True and is_managed_owner(owner):
            return owner
    return None


def managed_child(obj: Mapping[str, Any]) -> str:
    """Why ``obj`` is a child of an owner Kueue manages ("" when it is not)."""
    owner = managed_owner(obj)
    if owner is None:
        return ""
    return f"controlled by {owner.get('kind')} {owner.get('name')!r}: Kueue manages the owner"


def made_by_a_controller(user: str | None, controllers: Collection[str]) -> bool:
    """Whether ``user`` (``request.userInfo.username``) is a controller, which may make an object a
    child of an owner Kueue manages: one of ``controllers`` (the platform file's ``controllers``,
    :func:`webhook.core.platform.controllers.is_controller`: a name such as
    ``system:serviceaccount:kube-system:job-controller``, or ``system:serviceaccount:NAMESPACE:*``).
    None (a review without ``userInfo``: ``kgov mutate``) is not known, and trusted."""
    if user is None:
        return True
    return is_controller(user, controllers)


def user_made_child(request: AdmissionRequest, team: TeamPolicyCompiled, controllers: Collection[str]) -> str:
    """Why ``request`` is refused for making its object a child of a Kueue-managed owner ("" when
    it does not, or one of ``controllers`` sends it: :func:`made_by_a_controller`).

    Kueue leaves such a child to its owner's Workload (v0.19.2 ``FindAncestorJobManagedByKueue``:
    an owner of that name and uid in the namespace that carries a queue name), so the child is never
    queued itself: a Pod or Job that a user creates with a forged controller ``ownerReference`` to
    the team's own JobSet or Job would run at once, outside the team's quota. Only controllers make
    such children; an UPDATE of an object that already was one is not this request's doing.
    """
    obj, old = request.object, request.old_object
    owner = managed_owner(obj) if obj is not None else None
    if (
        obj is None
        or owner is None
        or (request.operation == "UPDATE" and old is not None and managed_owner(old) is not None)
    ):
        return ""
    if made_by_a_controller(request.user, controllers):
        return ""
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    what = f"{request.kind} {name!r}" if isinstance(name, str) and name else f"this {request.kind}"
    owner_kind = str(owner.get("kind"))
    made = "names" if request.operation == "CREATE" else "is given"
    return (
        f"{what} {made} {owner_kind} {owner.get('name')!r} as its controller owner, and Kueue leaves such an "
        f"object to its owner's Workload: it would run outside the queue of team {team.team!r}. Only a controller "
        f"makes such objects, not {request.user!r}: create the {owner_kind} itself, or leave out the "
        f"ownerReference (the team's policy then applies){_how_to_allow(request.user)}"
    )


def _how_to_allow(user: str | None) -> str:
    """The end of the denial: how a platform admin trusts ``user`` as a controller."""
    if user is None:
        return ""
    return (
        f". If {user!r} is a controller that makes such objects, a platform admin lists it in the platform "
        "file's controllers"
    )
