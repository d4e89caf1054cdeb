"""What the server knows: its options (:class:`ServerConfig`) and its current inputs
(:class:`GovernorState`: policies, namespace labels, node inventory, readiness)."""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from webhook.connections import ConnectionLimits
from webhook.core.admission import clip
from webhook.core.inventory import NodeInventory
from webhook.core.platform import PlatformError
from webhook.core.resolve import TeamIndex
from webhook.metrics import Metrics
from webhook.sources import InputError, load_namespace_labels, load_nodes, load_policies

__all__ = ["ConfigurationError", "GovernorState", "ServerConfig"]

log = structlog.get_logger("kgov.server")


class ConfigurationError(ValueError):
    """The server cannot start with these options; the message says what to change."""


@dataclass
class ServerConfig:
    """How to run the server. Paths are files; times are seconds.

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
        #: ``await wait(name, timeout)``: whether the namespace cache knows ``name`` within ``timeout``
        #: seconds (None without --watch-cluster: unknown labels are then final).
        self.namespace_wait: Callable[[str, float], Awaitable[bool]] | None = None
        self.in_flight = 0
        self.shutting_down = False
        #: Why the policy file on disk was rejected while an older policy is served (None: it was not).
        self.policy_rejected: str | None = None
        self.policy_loaded_at = ""
        self._mtimes: dict[Path, float] = {}

    # -- policy ------------------------------------------------------------------------------
    def policy_source(self) -> Path:
        source = self.config.platform or self.config.policy
        assert source is not None
        return source

    def load_policies(self) -> None:
        """(Re)load policies; on failure keep the previous ones, log the problem and say so in
        ``/readyz`` and ``kgov_policy_on_disk_rejected``."""
        try:
            policies = load_policies(self.config.platform, self.config.policy, self.config.extra_excluded)
        except (PlatformError, InputError) as exc:
            self.metrics.policy_reloads.labels("error").inc()
            log.error("policy load failed; keeping the previous policies", error=str(exc))
            if self.teams is None:
                raise
            self.policy_rejected = clip(str(exc), 512)
            self.metrics.policy_rejected.set(1)
            return
        self.teams = TeamIndex(policies)
        self.policy_rejected = None
        self.policy_loaded_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        self.metrics.policy_rejected.set(0)
        self.metrics.policy_reloads.labels("ok").inc()
        log.info("policies loaded", source=str(self.policy_source()), teams=len(policies.teams))

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
            reasons.append("policies not loaded")
        if not self.certificate_loaded:
            reasons.append("serving certificate not loaded")
        reasons.extend(f"{cache.name} cache not synced" for cache in self.caches if not cache.synced.is_set())
        if self.config.watch_cluster and self.inventory is None:
            reasons.append("node inventory not built")
        return reasons

    def notices(self) -> list[str]:
        """What is wrong without making the server unready."""
        if self.policy_rejected is None:
            return []
        return [
            f"policy on disk rejected, serving the last good one (loaded {self.policy_loaded_at}): "
            f"{self.policy_rejected}"
        ]

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
