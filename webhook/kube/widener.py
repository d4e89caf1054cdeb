"""Topology widening on the cluster (``kgov serve --topology-widening``): the I/O around
:mod:`webhook.core.plan.widen`.

Every replica watches Kueue's Workloads (``kueue.x-k8s.io/v1beta2``, list + watch through
:class:`webhook.kube.cache.ObjectCache`); one of them, the holder of a ``coordination.k8s.io``
Lease (kubernetes-asyncio's leader election), acts. Every ``tick`` seconds the leader looks at the
Workloads that are pending on the team Topology (:func:`~webhook.core.plan.widen.topology_pending`,
read from the cache, no API call) and whose patience may be over; for each it reads the Workload's
owner (its controller ``ownerReference``), asks :func:`~webhook.core.plan.widen.decide`, and on
``widen`` patches the owner (JSON Patch guarded by its ``resourceVersion``; the webhook accepts it
as the governor's own step), then the Workload, and creates a ``Normal`` Event
(``events.k8s.io/v1``, reason :data:`REASON`) on the owner. A patch refused because the object
changed meanwhile (``409``/``422`` of the ``test`` operation) is retried from fresh state on a
later tick.

Every replica also remembers, from each version the watch brings (not only the last, which a tick
may miss), Kueue's latest topology refusal of each Workload generation (:meth:`observe`): Kueue asks
TAS only while the quota fits, and the jobs behind may take that quota within the second, so the
refusal is often overwritten by a quota message before a tick reads it
(:func:`~webhook.core.plan.widen.topology_pending`, ``earlier``).

Who the governor is (the user its UPDATEs come as, which the webhook trusts for one step) is asked
of the API server once at start (:func:`whoami`, a ``SelfSubjectReview``).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.leaderelection import electionconfig, leaderelection
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

from webhook.core.admission.envelope import clip
from webhook.core.kueue.inventory import NodeInventory
from webhook.core.kueue.kinds import WorkloadKind, find_kind
from webhook.core.plan.widen import Decision, admitted, decide, kueue_refusal, tas_no_fit, topology_pending
from webhook.core.platform.resolve import TeamIndex
from webhook.kube.cache import ObjectCache, namespaced_key
from webhook.kube.policy_watch import NOTE_LIMIT, REPORTING_CONTROLLER, reporting_instance

__all__ = ["REASON", "TopologyWidener", "whoami", "widening_event"]

log = structlog.get_logger("kgov.widening")

KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"
#: The Event's reason and action.
REASON, ACTION = "TopologyWidened", "WidenTopology"


async def whoami(api: client.ApiClient) -> str:
    """The user the API server authenticates this client as (``SelfSubjectReview``, allowed to
    every authenticated user by the ``system:basic-user`` ClusterRole)."""
    review = await client.AuthenticationV1Api(api).create_self_subject_review(
        client.V1SelfSubjectReview(api_version="authentication.k8s.io/v1", kind="SelfSubjectReview")
    )
    return str(review.status.user_info.username)


def widening_event(obj: Mapping[str, Any], note: str, instance: str, now: float) -> dict[str, Any]:
    """A ``Normal`` ``events.k8s.io/v1`` Event about ``obj`` (the widened workload object)."""
    metadata = obj.get("metadata") or {}
    regarding = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "namespace": metadata.get("namespace"),
        "name": metadata.get("name"),
        "uid": metadata.get("uid"),
    }
    text = note.encode()
    if len(text) > NOTE_LIMIT:
        note = text[: NOTE_LIMIT - 3].decode(errors="ignore") + "..."
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{metadata.get('name')}.{int(now * 1e9):x}", "namespace": metadata.get("namespace")},
        "eventTime": datetime.datetime.fromtimestamp(now, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "type": "Normal",
        "reason": REASON,
        "action": ACTION,
        "note": note,
        "regarding": regarding,
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance,
    }


def _owner(workload: Mapping[str, Any]) -> Mapping[str, Any] | None:
    owners = (workload.get("metadata") or {}).get("ownerReferences") or []
    return next((o for o in owners if isinstance(o, Mapping) and o.get("controller") is True), None)


class TopologyWidener:
    """The Workload watch and, while this replica holds Lease ``lease_namespace/lease_name``, the
    widening loop. ``teams()``, ``namespace_labels(ns)`` and ``inventory()`` read the server's
    current policy and caches."""

    def __init__(
        self,
        api: client.ApiClient,
        teams: Callable[[], TeamIndex | None],
        namespace_labels: Callable[[str], Mapping[str, str] | None],
        inventory: Callable[[], NodeInventory | None],
        lease: tuple[str, str],
        tick: float = 2.0,
    ) -> None:
        self.api = api
        self.teams, self.namespace_labels, self.inventory = teams, namespace_labels, inventory
        self.lease_namespace, self.lease_name = lease
        self.tick = tick
        self.objects = client.CustomObjectsApi(api)
        self.events = client.EventsV1Api(api)
        lister = functools.partial(self.objects.list_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION, "workloads")
        self.workloads = ObjectCache("workloads", api, lister, namespaced=True)
        self.instance = reporting_instance()
        # The pod's name, made unique per process (a restarted container is another candidate).
        self.identity = clip(f"{self.instance}-{secrets.token_hex(4)}", 128)
        self.leading = False
        #: Workload uid → (its resourceVersion, no look before this time): skips what was decided.
        self.quiet: dict[str, tuple[str, float]] = {}
        #: Workload uid → (generation, Kueue's last message refusing it on topology at that generation).
        self.refused: dict[str, tuple[int, str]] = {}
        self.workloads.on_event = self.observe
        self._task: asyncio.Task[None] | None = None
        self._leading: asyncio.Task[Any] | None = None

    def start(self) -> None:
        self.workloads.start()
        self._task = asyncio.create_task(self._elect(), name="topology-widening")

    async def stop(self) -> None:
        """Stop electing and widening; a leader then gives its Lease up (:meth:`release`)."""
        was_leading = self.leading
        # The election runs the leading loop as a task of its own: both are cancelled.
        for task in (self._task, self._leading):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self.leading = False
        if was_leading:
            await self.release()
        await self.workloads.stop()

    async def release(self) -> bool:
        """Give the Lease up, as client-go's ``ReleaseOnCancel`` does: ``spec.holderIdentity``
        emptied and ``leaseDurationSeconds`` 1, so that another replica, which reads the Lease
        every retry period (2 s), takes over at once rather than after the lease duration (15 s).

        A JSON Patch that first ``test``s that this replica still holds it: a Lease another
        replica took meanwhile is left alone. Returns whether the Lease was released; a refused
        or failed call is logged, never raised (stopping goes on)."""
        patch = [
            {"op": "test", "path": "/spec/holderIdentity", "value": self.identity},
            {"op": "replace", "path": "/spec/holderIdentity", "value": ""},
            {"op": "replace", "path": "/spec/leaseDurationSeconds", "value": 1},
        ]
        try:
            await client.CoordinationV1Api(self.api).patch_namespaced_lease(
                self.lease_name, self.lease_namespace, patch
            )
        except ApiException as exc:
            log.warning("cannot release the topology widening Lease", status=exc.status, reason=str(exc.reason))
            return False
        log.info("topology widening: Lease released", lease=f"{self.lease_namespace}/{self.lease_name}")
        return True

    async def _elect(self) -> None:
        while True:
            lock = LeaseLock(self.lease_name, self.lease_namespace, self.identity, self.api)
            config = electionconfig.Config(lock, 15, 10, 2, self._lead, self._follow)
            try:
                await leaderelection.LeaderElection(config).run()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a lease call that broke: stand again after a pause
                log.warning("leader election failed", error=f"{type(exc).__name__}: {exc}".strip())
            self.leading = False
            await asyncio.sleep(2.0)

    async def _follow(self) -> None:
        self.leading = False
        log.info("topology widening: not leading", lease=f"{self.lease_namespace}/{self.lease_name}")

    async def _lead(self) -> None:
        self._leading = asyncio.current_task()
        self.leading = True
        log.info("topology widening: leading", lease=f"{self.lease_namespace}/{self.lease_name}")
        await self.workloads.synced.wait()
        while True:
            try:
                await self.sweep(time.time())
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # one bad round must not end the leadership
                log.warning("topology widening round failed", error=f"{type(exc).__name__}: {exc}".strip())
            await asyncio.sleep(self.tick)

    def observe(self, event: str, workload: Mapping[str, Any]) -> None:
        """Remember ``workload``'s ``QuotaReserved=False`` message when it refuses a podset on a
        topology (any: the team is resolved at the tick) and is Kueue's word on its generation;
        forget it when the Workload is deleted (``event`` ``DELETED``)."""
        metadata = workload.get("metadata") or {}
        if event == "DELETED":
            self.refused.pop(str(metadata.get("uid")), None)
            return
        generation, message = metadata.get("generation"), kueue_refusal(workload)
        if isinstance(generation, int) and message is not None and tas_no_fit(message, None):
            self.refused[str(metadata.get("uid"))] = (generation, message)

    def earlier(self, workload: Mapping[str, Any]) -> str | None:
        """The topology refusal :meth:`observe` remembered for ``workload``'s current generation."""
        metadata = workload.get("metadata") or {}
        remembered = self.refused.get(str(metadata.get("uid")))
        return remembered[1] if remembered is not None and remembered[0] == metadata.get("generation") else None

    async def sweep(self, now: float) -> None:
        """One round over the cached Workloads (see the module docstring)."""
        teams = self.teams()
        if teams is None:
            return
        for workload in list(self.workloads.objects.values()):
            metadata = workload.get("metadata") or {}
            uid, version = str(metadata.get("uid")), str(metadata.get("resourceVersion"))
            quiet = self.quiet.get(uid)
            if quiet is not None and quiet[0] == version and now < quiet[1]:
                continue
            try:
                until = await self._consider(workload, teams, now)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # one workload that breaks a rule must not stop the round
                error = f"{type(exc).__name__}: {exc}".strip()
                log.warning("topology widening skipped a workload", workload=namespaced_key(workload), error=error)
                until = now + 30.0
            if until is not None:
                self.quiet[uid] = (version, until)
        known = {str((w.get("metadata") or {}).get("uid")) for w in self.workloads.objects.values()}
        for uid in [u for u in self.quiet if u not in known]:
            del self.quiet[uid]
        for uid in [u for u in self.refused if u not in known]:
            del self.refused[uid]

    async def _consider(self, workload: Mapping[str, Any], teams: TeamIndex, now: float) -> float | None:
        """Decide on one cached Workload; returns until when not to look at this version again
        (None: nothing to remember, it is not pending on its team's topology)."""
        namespace = str((workload.get("metadata") or {}).get("namespace"))
        team = teams.resolve(namespace, self.namespace_labels(namespace)).team
        placement = team.topology if team is not None else None
        if team is None or placement is None or placement.patienceSeconds is None or admitted(workload):
            return None
        earlier = self.earlier(workload)
        if not topology_pending(workload, placement.topologyName, earlier):
            return None
        decision = await self._decide(workload, team, now, earlier)
        if decision is None:  # the owner could not be read: again in 30 s
            return now + 30.0
        # Not again while this version stands: until its patience ends (wait), or for 30 s (leave;
        # widen and sync, whose own patch makes a new version the watch brings).
        return decision.at if decision.action == "wait" and decision.at is not None else now + 30.0

    async def _decide(
        self, workload: Mapping[str, Any], team: Any, now: float, earlier: str | None = None
    ) -> Decision | None:
        owner = _owner(workload)
        row = find_kind(str(owner.get("apiVersion")), str(owner.get("kind"))) if owner else None
        if owner is None or row is None or row.suspend is None:
            return Decision("leave", "no owner the governor can widen")
        namespace = str((workload.get("metadata") or {}).get("namespace"))
        try:
            obj = await self._get(row, str(owner.get("apiVersion")), namespace, str(owner.get("name")))
        except ApiException as exc:
            log.warning("cannot read the workload's owner", workload=namespaced_key(workload), status=exc.status)
            return None
        if (obj.get("metadata") or {}).get("uid") != owner.get("uid"):
            return Decision("leave", "the owner was replaced")
        decision = decide(workload, obj, row, team, self.inventory(), now, earlier)
        where = f"{namespace}/{owner.get('name')}"
        if decision.action in ("widen", "sync"):
            await self._apply(decision, obj, row, workload, where, now)
        else:
            log.debug("topology widening", object=where, action=decision.action, why=decision.why)
        return decision

    async def _get(self, row: WorkloadKind, api_version: str, namespace: str, name: str) -> dict[str, Any]:
        group, _, version = api_version.rpartition("/")
        obj = await self.objects.get_namespaced_custom_object(group, version, namespace, row.resource, name)
        assert isinstance(obj, dict)
        return obj

    async def _apply(
        self,
        decision: Decision,
        obj: Mapping[str, Any],
        row: WorkloadKind,
        workload: Mapping[str, Any],
        where: str,
        now: float,
    ) -> None:
        group, _, version = str(obj.get("apiVersion")).rpartition("/")
        metadata = obj.get("metadata") or {}
        wl_meta = workload.get("metadata") or {}
        try:
            if decision.object_patch:
                await self.objects.patch_namespaced_custom_object(
                    group,
                    version,
                    str(metadata.get("namespace")),
                    row.resource,
                    str(metadata.get("name")),
                    decision.object_patch,
                )
            if decision.workload_patch:
                await self.objects.patch_namespaced_custom_object(
                    KUEUE_GROUP,
                    KUEUE_VERSION,
                    str(wl_meta.get("namespace")),
                    "workloads",
                    str(wl_meta.get("name")),
                    decision.workload_patch,
                )
        except ApiException as exc:
            log.warning("topology widening patch refused", object=where, status=exc.status, reason=str(exc.reason))
            return
        log.info(
            "topology widened" if decision.action == "widen" else "workload synced", object=where, why=decision.why
        )
        if decision.step is not None:
            note = f"{decision.why}; podsets {', '.join(decision.step.podsets)}; Kueue: {decision.step.reason}"
            body = widening_event(obj, note, self.instance, now)
            try:
                # A plain dict body: the generated client serialises it as it is.
                create = cast(Callable[[str, dict[str, Any]], Awaitable[Any]], self.events.create_namespaced_event)
                await create(str(metadata.get("namespace")), body)
            except ApiException as exc:  # an Event is a report: the widening stands without it
                log.warning("cannot create the widening Event", object=where, status=exc.status)
