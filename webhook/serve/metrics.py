"""Prometheus metrics of the admission server (prometheus-client), named for what they count.

Every label value comes from a closed set defined here (the kinds table, the rule names, fixed
outcomes and reasons), with ``other`` for anything else: a request can never add a time series, so
``/metrics`` stays the same size whatever clients send (issue: 60,000 made-up kinds once made it
126 MiB). Use the ``*_label`` helpers to turn request values into label values.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from webhook.core.kueue.kinds import KINDS

__all__ = [
    "CACHE_NAMES",
    "CLOSE_REASONS",
    "KIND_LABELS",
    "OPERATIONS",
    "OTHER",
    "OUTCOMES",
    "POLICY_SOURCES",
    "REFUSAL_REASONS",
    "RULE_LABELS",
    "Metrics",
    "kind_label",
    "operation_label",
    "rule_label",
]

OTHER = "other"
#: ``request.kind.kind`` values counted under their own name: the workload kinds table (SPEC §4).
KIND_LABELS = frozenset(row.kind for row in KINDS)
OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})
#: The planner's rule names (``webhook.core.plan.planner.Rule``) plus ``namespace`` (a team conflict).
RULE_LABELS = frozenset({"queue", "kueuePriority", "podPriority", "topology", "nodeAffinity", "suspend", "namespace"})
#: How one POST /mutate ended: the four review results, then the HTTP refusals.
OUTCOMES = (
    "patched",
    "allowed",
    "denied",
    "invalid",
    "malformed",
    "body_too_large",
    "content_encoding",
    "body_timeout",
    "client_disconnected",
    "connection_dropped",
    "not_ready",
    "error",
)
#: Requests answered with an HTTP error before any review (status in parentheses).
REFUSAL_REASONS = (
    "body_too_large",  # 413, declared or read
    "content_encoding",  # 415, any Content-Encoding but identity
    "body_timeout",  # 408, body not received within the body deadline
    "bad_request",  # 400 from the HTTP parser (bad request line, headers, framing)
    "client_disconnected",  # the client left mid-body; nobody to answer
)
#: The cluster caches (``kgov_cache_lists_total{cache}``): --watch-cluster's, and --policy-configmap's.
CACHE_NAMES = ("namespaces", "nodes", "policy-configmap")
#: Where policies come from (``kgov_policy_reloads_total{source}``).
POLICY_SOURCES = ("file", "configmap")
#: Why the server closed a connection on its own.
CLOSE_REASONS = ("header_timeout", "idle_timeout", "over_limit", "tls_handshake_failed", "shutdown")


def kind_label(kind: str) -> str:
    """``kind`` when it is a kind of the kinds table, else ``other``."""
    return kind if kind in KIND_LABELS else OTHER


def operation_label(operation: str) -> str:
    return operation if operation in OPERATIONS else OTHER


def rule_label(rule: str) -> str:
    return rule if rule in RULE_LABELS else OTHER


class Metrics:
    """One registry per server (tests make several servers in one process)."""

    def __init__(self) -> None:
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "kgov_admission_requests_total",
            "AdmissionReview requests answered, by kind (workload kinds, else other), operation and result "
            "(patched, allowed, denied, invalid).",
            ["kind", "operation", "result"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "kgov_admission_duration_seconds",
            "Time to answer one POST /mutate, seconds (handler start to response), by outcome.",
            ["outcome"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "kgov_admission_in_flight_requests", "AdmissionReview requests being answered.", registry=self.registry
        )
        self.changes = Counter(
            "kgov_admission_changes_total",
            "Planned changes (JSON Patch operations), by rule.",
            ["rule"],
            registry=self.registry,
        )
        self.denials = Counter(
            "kgov_admission_denials_total", "Denied requests, by rule.", ["rule"], registry=self.registry
        )
        self.warnings = Counter(
            "kgov_admission_warnings_total", "Warnings returned, by rule.", ["rule"], registry=self.registry
        )
        self.malformed = Counter(
            "kgov_admission_malformed_total", "Requests answered with HTTP 400.", registry=self.registry
        )
        self.internal_errors = Counter(
            "kgov_admission_internal_errors_total",
            "Requests answered with HTTP 500 (a bug: see the log).",
            registry=self.registry,
        )
        self.refused = Counter(
            "kgov_http_refused_total",
            "HTTP requests refused before any review, by reason (body_too_large 413, content_encoding 415, "
            "body_timeout 408, bad_request 400 from the HTTP parser, client_disconnected).",
            ["reason"],
            registry=self.registry,
        )
        self.connections = Gauge(
            "kgov_connections_open",
            "Open client connections on the webhook port (TLS handshakes in progress included).",
            registry=self.registry,
        )
        self.connections_closed = Counter(
            "kgov_connections_closed_total",
            "Connections the server closed on its own, by reason (header_timeout, idle_timeout (a fresh "
            "connection never used), over_limit, tls_handshake_failed, shutdown).",
            ["reason"],
            registry=self.registry,
        )
        self.policy_reloads = Counter(
            "kgov_policy_reloads_total",
            "New policy versions read, by source (file: --platform or --policy; configmap: --policy-configmap) "
            "and result (ok: now served; error: rejected, the last good policy stays in force).",
            ["source", "result"],
            registry=self.registry,
        )
        self.policy_rejected = Gauge(
            "kgov_policy_rejected",
            "1 while the newest policy version (file or ConfigMap) is rejected and the last good one is "
            "served (or none yet); else 0.",
            registry=self.registry,
        )
        self.policy_loaded_time = Gauge(
            "kgov_policy_last_success_timestamp_seconds",
            "Unix time at which the served policy was loaded (0: none yet).",
            registry=self.registry,
        )
        self.policy_hash = Gauge(
            "kgov_policy_hash",
            "The first 48 bits of the SHA-256 of the served policy's JSON, as a number (0: none yet): "
            "replicas serving the same policy show the same value.",
            registry=self.registry,
        )
        self.cert_reloads = Counter(
            "kgov_certificate_reloads_total",
            "Serving certificate reloads, by result.",
            ["result"],
            registry=self.registry,
        )
        self.cache_lists = Counter(
            "kgov_cache_lists_total",
            "Full lists of a cluster cache, by cache (namespaces and nodes: --watch-cluster; policy-configmap: "
            "--policy-configmap) and reason "
            "(initial; expired: the watch's resourceVersion was gone, 410; error: a list or watch refused).",
            ["cache", "reason"],
            registry=self.registry,
        )
        self.namespace_waits = Counter(
            "kgov_namespace_cache_waits_total",
            "Requests in a namespace the namespace cache did not know yet, by how the wait ended (seen: the "
            "watch delivered it in time; unseen: refused, to be retried).",
            ["result"],
            registry=self.registry,
        )
        # Every series exists from the start, at zero, so dashboards and alerts see it before it moves.
        for outcome in OUTCOMES:
            self.latency.labels(outcome)
        for reason in REFUSAL_REASONS:
            self.refused.labels(reason)
        for reason in CLOSE_REASONS:
            self.connections_closed.labels(reason)
        for cache in CACHE_NAMES:
            for reason in ("initial", "expired", "error"):
                self.cache_lists.labels(cache, reason)
        for result in ("seen", "unseen"):
            self.namespace_waits.labels(result)
        for result in ("ok", "error"):
            for source in POLICY_SOURCES:
                self.policy_reloads.labels(source, result)
            self.cert_reloads.labels(result)

    def child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, looked up once per label set (the request path's metrics are
        updated several times per request; ``labels()`` takes a lock and builds a key each time).
        ``labels`` must come from the closed sets of this module, so the lookup stays bounded."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found
