"""The policy ConfigMap, watched (``kgov serve --policy-configmap [NAMESPACE/]NAME``).

One ConfigMap, the one ``kgov generate`` writes as ``policy-configmap.yaml`` and the Helm chart
installs (key ``policy.json``, a PolicySet), is kept by the list + watch loop of
:class:`webhook.kube.cache.ObjectCache` (resume from the last version, bookmarks, ``410 Gone``
re-list, back-off), asking only for that object: ``fieldSelector=metadata.name=NAME``, which the API
server's RBAC authorizer reads as a request for that name, so a Role with ``resourceNames: [NAME]``
suffices for ``get``, ``list`` and ``watch``.

Each new version of the object (a new ``resourceVersion``, or the object gone) is offered to the
server's state; a re-list that finds the same version changes nothing. A version that is rejected
(no ``policy.json`` key, not JSON, not a valid PolicySet, the ConfigMap deleted or absent) leaves the
last good policy in force and is reported as a Kubernetes Event of type ``Warning`` on the ConfigMap
(``events.k8s.io/v1``: :func:`policy_event`), besides the state's log line and metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import os
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import structlog
from kubernetes_asyncio import client

from webhook.core.admission.envelope import clip
from webhook.core.platform.policy import PolicySet
from webhook.kube.cache import ObjectCache
from webhook.kube.files import InputError, parse_policies

__all__ = ["EVENT_ACTION", "REPORTING_CONTROLLER", "PolicyConfigMapWatch", "policy_event", "reporting_instance"]

log = structlog.get_logger("kgov.policy")

#: The Event's ``reportingController`` (a qualified name, as the API server requires).
REPORTING_CONTROLLER = "kueue-governor.io/governor"
#: The Event's ``action``: what the governor did when the problem arose.
EVENT_ACTION = "LoadPolicy"
#: The events.k8s.io/v1 limit on ``note``, in bytes.
NOTE_LIMIT = 1024

#: ``offer(load)``: serve the policies ``load()`` returns, or keep the last good ones when it raises;
#: returns the problem (None: taken). :meth:`webhook.serve.state.GovernorState.take_policies` for ``configmap``.
Offer = Callable[[Callable[[], PolicySet]], Exception | None]


def reporting_instance() -> str:
    """Who reports: the pod's name (``$POD_NAME``, else the host name, which is the pod's in a pod)."""
    return clip(os.environ.get("POD_NAME") or socket.gethostname() or "kgov", 128)


def policy_event(
    namespace: str,
    name: str,
    configmap: dict[str, Any] | None,
    reason: str,
    note: str,
    instance: str,
    now: float | None = None,
) -> dict[str, Any]:
    """An ``events.k8s.io/v1`` Event of type ``Warning`` about ConfigMap ``namespace/name``.

    ``configmap`` (the object seen last; None when there never was one) gives ``regarding`` its
    ``uid`` and ``resourceVersion``. ``reason`` is UpperCamelCase (``PolicyRejected``,
    ``PolicyConfigMapDeleted``, ``PolicyConfigMapNotFound``), ``note`` the problem, cut to the
    API's 1 KiB. The name is ``<configmap>.<nanoseconds in hex>``, as client-go names events.
    """
    stamp = time.time() if now is None else now
    metadata = (configmap or {}).get("metadata") or {}
    regarding: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "namespace": namespace, "name": name}
    for key in ("uid", "resourceVersion"):
        if isinstance(metadata.get(key), str):
            regarding[key] = metadata[key]
    text = note.encode()
    if len(text) > NOTE_LIMIT:
        note = text[: NOTE_LIMIT - 3].decode(errors="ignore") + "..."
    event_time = datetime.datetime.fromtimestamp(stamp, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{int(stamp * 1e9):x}", "namespace": namespace},
        "eventTime": event_time,
        "type": "Warning",
        "reason": reason,
        "action": EVENT_ACTION,
        "note": note,
        "regarding": regarding,
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance,
    }


class PolicyConfigMapWatch:
    """Watch ConfigMap ``namespace/name`` and offer the policy of each new version of it to ``offer``
    (``extra_excluded`` namespaces added, as for a file); ``serving()`` says whether a policy is in
    force (an Event then says that the last good one stays).

    ``cache`` (``name`` ``policy-configmap``) is the list + watch loop; the server starts and stops
    it, counts its lists and waits for its first one. Events are created in the background
    (``create_event``: the ``EventsV1Api.create_namespaced_event`` call); one that fails is logged,
    never retried, and never holds up the policy.
    """

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        name: str,
        offer: Offer,
        serving: Callable[[], bool],
        extra_excluded: list[str] | None = None,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.where = f"ConfigMap {namespace}/{name}"
        self.offer = offer
        self.serving = serving
        self.extra_excluded = list(extra_excluded or [])
        lister = functools.partial(
            client.CoreV1Api(api).list_namespaced_config_map, namespace, field_selector=f"metadata.name={name}"
        )
        self.cache = ObjectCache("policy-configmap", api, lister)
        self.cache.on_change = self._changed
        # A plain dict body: the generated client serialises it as it is.
        self.create_event = cast(
            Callable[[str, dict[str, Any]], Awaitable[Any]], client.EventsV1Api(api).create_namespaced_event
        )
        self.instance = reporting_instance()
        #: The version offered last: a resourceVersion, "" for "no ConfigMap", None before the first.
        self.offered: str | None = None
        #: The ConfigMap as seen last (an Event about its deletion refers to it).
        self.last_seen: dict[str, Any] | None = None
        self.pending: set[asyncio.Task[None]] = set()

    def _load(self, configmap: dict[str, Any] | None) -> PolicySet:
        if configmap is None:
            what = "was deleted" if self.last_seen is not None else "does not exist"
            raise InputError(f"{self.where} {what}")
        return parse_policies({**configmap, "kind": "ConfigMap"}, self.where, self.extra_excluded)

    def _changed(self) -> None:
        configmap = self.cache.objects.get(self.name)
        version = str((configmap.get("metadata") or {}).get("resourceVersion") or "?") if configmap else ""
        if version == self.offered:
            return  # a re-list (after 410, or an error) that found the version offered already
        self.offered = version
        regarding = configmap if configmap is not None else self.last_seen
        if configmap is None:
            reason = "PolicyConfigMapDeleted" if self.last_seen is not None else "PolicyConfigMapNotFound"
        else:
            reason = "PolicyRejected"
        error = self.offer(functools.partial(self._load, configmap))
        if configmap is not None:
            self.last_seen = configmap
        if error is None:
            return
        kept = "; the last good policy stays in force" if self.serving() else "; no policy is served yet"
        self._emit(regarding, reason, f"{error}{kept}")

    def _emit(self, regarding: dict[str, Any] | None, reason: str, note: str) -> None:
        body = policy_event(self.namespace, self.name, regarding, reason, note, self.instance)
        task = asyncio.get_running_loop().create_task(self._create(body))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def _create(self, body: dict[str, Any]) -> None:
        try:
            await self.create_event(self.namespace, body)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # an Event is a report: its loss must not touch the policy
            log.warning(
                "cannot create the Event about the policy ConfigMap",
                configmap=f"{self.namespace}/{self.name}",
                reason=body["reason"],
                error=f"{type(exc).__name__}: {exc}".strip(),
            )
        else:
            log.info("event created", configmap=f"{self.namespace}/{self.name}", reason=body["reason"])

    def start(self) -> None:
        self.cache.start()

    async def stop(self) -> None:
        await self.cache.stop()
        for task in list(self.pending):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
