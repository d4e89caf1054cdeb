"""Prometheus metrics of the admission server (prometheus-client), named for what they count."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["Metrics"]


class Metrics:
    """One registry per server (tests make several servers in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "kgov_admission_requests_total",
            "AdmissionReview requests answered, by kind, operation and result (patched, allowed, denied, invalid).",
            ["kind", "operation", "result"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "kgov_admission_duration_seconds",
            "Time to answer one AdmissionReview, seconds (body read to response written).",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
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
        self.policy_reloads = Counter(
            "kgov_policy_reloads_total", "Policy reloads, by result.", ["result"], registry=self.registry
        )
        self.cert_reloads = Counter(
            "kgov_certificate_reloads_total",
            "Serving certificate reloads, by result.",
            ["result"],
            registry=self.registry,
        )
