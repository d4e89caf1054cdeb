"""What the server knows: its options (:class:`ServerConfig`) and its current inputs
(:class:`GovernorState`: policies, namespace labels, node inventory, readiness).

Policies come from one source: a platform or policy file (re-read when it changes) or the policy
ConfigMap (watched: :mod:`webhook.kube.policy_watch`). Each new version goes through
:meth:`GovernorState.take_policies`: a valid one replaces the policies at once; an invalid one is
logged, counted (``kgov_policy_reloads_total{source,result}``, ``kgov_policy_rejected``) and shown in
``/readyz``, and the last good policies stay in force.
"""

from __future__ import annotations

import datetime
import hashlib
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from webhook.core.admission.envelope import clip
from webhook.core.kueue.inventory import NodeInventory
from webhook.core.platform.platform import PlatformError
from webhook.core.platform.policy import PolicySet
from webhook.core.platform.resolve import TeamIndex
from webhook.kube.files import InputError, load_namespace_labels, load_nodes, load_policies
from webhook.serve.connections import ConnectionLimits
from webhook.serve.metrics import Metrics

__all__ = ["ConfigurationError", "GovernorState", "ServerConfig"]

log = structlog.get_logger("kgov.server")


class ConfigurationError(ValueError):
    """The server cannot start with these options; the message says what to change."""


@dataclass
class ServerConfig:
    """How to run the server. Paths are files; times are seconds.

    Exactly one policy source: ``platform``, ``policy`` (files) or ``policy_configmap``.
    ``metrics_port``: the plain-HTTP port of ``/metrics`` (None: no metrics listener).
    ``shutdown_delay``: after SIGTERM, seconds of serving while ``/readyz`` says not ready.
    ``shutdown_timeout``: then, seconds to drain before every connection is dropped. The pod's
    ``terminationGracePeriodSeconds`` must exceed the two together. ``reuse_port``: listen with
    ``SO_REUSEPORT`` (processes sharing the webhook port, the kernel spreading connections).
    """

    cert_file: Path
    key_file: Path
    platform: Path | None = None
    policy: Path | None = None
    #: (namespace, name) of the policy ConfigMap to watch, instead of a file.
    policy_configmap: tuple[str, str] | None = None
    host: str = "0.0.0.0"
    port: int = 8443
    metrics_host: str | None = None
    metrics_port: int | None = 8080
    namespaces_file: Path | None = None
    nodes_file: Path | None = None
    kubeconfig: str | None = None
    watch_cluster: bool = False
    extra_excluded: list[str] = field(default_factory=list)
    reload_interval: float = 2.0
    shutdown_delay: float = 5.0
    shutdown_timeout: float = 20.0
    reuse_port: bool = False
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    #: (namespace, name) of the Lease of topology widening (None: no widening; needs watch_cluster).
    widening_lease: tuple[str, str] | None = None


class GovernorState:
    """What the handler reads: current policies, namespace labels and node inventory."""

    def __init__(self, config: ServerConfig, metrics: Metrics) -> None:
        self.config = config
        self.metrics = metrics
        self.teams: TeamIndex | None = None
        self.static_namespaces: dict[str, dict[str, str]] = {}
        self.namespace_lookup: Callable[[str], Mapping[str, str] | None] = self.static_namespaces.get
        self.inventory: NodeInventory | None = None
        self.certificate_loaded = False
        self.caches: list[Any] = []
        #: The user the governor's topology widening runs as (the webhook trusts its one step), and the
        #: widener (a webhook.kube.widener.TopologyWidener) when widening is on.
        self.governor_user: str | None = None
        self.widener: Any = None
        #: The policy ConfigMap's watch (a webhook.kube.policy_watch.PolicyConfigMapWatch), if any.
        self.policy_watch: Any = None
        #: ``await wait(name, timeout)``: whether the namespace cache knows ``name`` within ``timeout``
        #: seconds (None without --watch-cluster: unknown labels are then final).
        self.namespace_wait: Callable[[str, float], Awaitable[bool]] | None = None
        #: POST /mutate requests being answered; ``kgov_admission_in_flight_requests`` reads it when
        #: scraped, so a request updates one integer instead of the gauge twice.
        self.in_flight = 0
        metrics.in_flight.set_function(lambda: self.in_flight)
        self.shutting_down = False
        #: Why the policy file on disk was rejected while an older policy is served (None: it was not).
        self.policy_rejected: str | None = None
        self.policy_loaded_at = ""
        #: SHA-256 (hex) of the served policies' canonical JSON ("" before the first).
        self.policy_hash = ""
        self._mtimes: dict[Path, float] = {}

    # -- policy ------------------------------------------------------------------------------
    def policy_source(self) -> Path | None:
        """The policy file, None when the policy comes from a ConfigMap."""
        return self.config.platform or self.config.policy

    def policy_source_name(self) -> str:
        """The policy's source as messages name it: the file, or ``ConfigMap NAMESPACE/NAME``."""
        file = self.policy_source()
        if file is not None:
            return str(file)
        assert self.config.policy_configmap is not None
        return "ConfigMap {}/{}".format(*self.config.policy_configmap)

    def load_policies(self) -> None:
        """(Re)load the policy file; on failure keep the previous policies (see :meth:`take_policies`).

        Raises:
            PlatformError / InputError: the file is invalid and no policy was loaded before.
        """
        config = self.config
        error = self.take_policies("file", lambda: load_policies(config.platform, config.policy, config.extra_excluded))
        if error is not None and self.teams is None:
            raise error

    def take_policies(self, source: str, load: Callable[[], PolicySet]) -> Exception | None:
        """Serve the policies ``load()`` returns (``source``: ``file`` or ``configmap``, the metric's
        label), or, when it raises or they cannot work with this server's options (teams selecting
        namespaces by labels without ``--watch-cluster`` or ``--namespaces``), keep the previous
        ones: log the problem, count it, and say so in ``/readyz``. Returns the problem (None: taken).
        """
        try:
            policies = load()
            teams = TeamIndex(policies)
            if teams.needs_namespace_labels and not (self.config.watch_cluster or self.config.namespaces_file):
                raise InputError(
                    f"{self.policy_source_name()}: some teams select namespaces by labels: give --watch-cluster "
                    "(or --namespaces FILE) so the server knows namespace labels; without them those namespaces "
                    "would pass unmutated"
                )
        except (PlatformError, InputError, ValueError) as exc:
            self.metrics.policy_reloads.labels(source, "error").inc()
            self.policy_rejected = clip(str(exc), 512)
            self.metrics.policy_rejected.set(1)
            log.error(
                "policy rejected; keeping the previous policies" if self.teams else "policy rejected; none loaded yet",
                source=self.policy_source_name(),
                error=str(exc),
            )
            return exc
        self.teams = teams
        self.policy_rejected = None
        self.policy_loaded_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        self.policy_hash = hashlib.sha256(policies.model_dump_json().encode()).hexdigest()
        self.metrics.policy_rejected.set(0)
        self.metrics.policy_reloads.labels(source, "ok").inc()
        self.metrics.policy_loaded_time.set(time.time())
        self.metrics.policy_hash.set(int(self.policy_hash[:12], 16))
        log.info(
            "policies loaded",
            source=self.policy_source_name(),
            teams=len(policies.teams),
            sha256=self.policy_hash[:12],
        )
        return None

    def load_static_inputs(self) -> None:
        if self.config.namespaces_file is not None:
            self.static_namespaces.update(load_namespace_labels(self.config.namespaces_file))
        if self.config.nodes_file is not None:
            self.inventory = load_nodes(self.config.nodes_file)

    def ready(self) -> list[str]:
        """Reasons the server is not ready (empty: ready)."""
        reasons = []
        if self.shutting_down:
            reasons.append("shutting down")
        if self.teams is None:
            why = f": {self.policy_rejected}" if self.policy_rejected else ""
            reasons.append(f"policies not loaded{why}")
        if not self.certificate_loaded:
            reasons.append("serving certificate not loaded")
        reasons.extend(f"{cache.name} cache not synced" for cache in self.caches if not cache.synced.is_set())
        if self.config.watch_cluster and self.inventory is None:
            reasons.append("node inventory not built")
        return reasons

    def notices(self) -> list[str]:
        """What is wrong without making the server unready."""
        if self.policy_rejected is None or self.teams is None:
            return []
        what = "policy on disk" if self.policy_source() is not None else f"policy of {self.policy_source_name()}"
        return [f"{what} rejected, serving the last good one (loaded {self.policy_loaded_at}): {self.policy_rejected}"]

    def changed(self, *paths: Path) -> bool:
        """True when any file's modification time differs from the last call (first call: True)."""
        moved = False
        for path in paths:
            try:
                mtime = path.stat().st_mtime_ns
            except OSError:
                continue
            if self._mtimes.get(path) != mtime:
                self._mtimes[path] = mtime
                moved = True
        return moved
