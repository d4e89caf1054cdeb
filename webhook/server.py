"""The admission webhook server: aiohttp over TLS 1.2+, and a plain-HTTP port for metrics.

Webhook port (TLS): ``POST /mutate`` (AdmissionReview v1 and v1beta1), ``GET /healthz`` (process
alive), ``GET /readyz`` (certificate, policies and caches loaded; not while shutting down).
Metrics port (plain HTTP, so a NetworkPolicy can keep scrapers off the webhook port):
``GET /metrics`` (Prometheus), ``/healthz`` and ``/readyz`` again. The handler is the transport
only; decisions come from :func:`webhook.core.review.review`.

What a client cannot do (issue "hostile and broken clients"): send a compressed body (415, never
decompressed), a body over :data:`MAX_BODY_BYTES` (413, also refused before ``100-continue``),
hold a connection without sending (header, body and idle deadlines, a connection cap:
:mod:`webhook.connections`), add a metric series (closed label sets: :mod:`webhook.metrics`),
or make a log line or an answer of megabytes (echoed values cut: :func:`webhook.core.admission.clip`).
Every error answer is JSON.

Certificates and the policy file are re-read when they change on disk (SPEC §5, §7). On SIGTERM
the server reports not ready but keeps serving for ``shutdown_delay`` (so endpoints drop it
first), then stops accepting, drains, and exits within ``shutdown_timeout``, whatever clients do.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import gc
import logging
import os
import signal
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.web_protocol import RequestPayloadError
from kubernetes_asyncio.config import ConfigException
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from webhook.connections import ConnectionLimits, ConnectionTracker, GuardedHandler, TlsGate
from webhook.core.admission import MalformedReview, clip, decode_body
from webhook.core.inventory import NodeInventory
from webhook.core.platform import PlatformError
from webhook.core.resolve import TeamIndex
from webhook.core.review import ReviewOutcome, review
from webhook.metrics import Metrics, kind_label, operation_label, rule_label
from webhook.sources import InputError, load_namespace_labels, load_nodes, load_policies
from webhook.tlsconfig import describe_pair_error, make_ssl_context, serve_certificate_of

__all__ = [
    "MAX_BODY_BYTES",
    "ConfigurationError",
    "ConnectionLimits",
    "GovernorState",
    "JsonAccessLogger",
    "ServerConfig",
    "make_app",
    "make_metrics_app",
    "make_ssl_context",
    "run_server",
    "serve",
]

log = structlog.get_logger("kgov.server")

#: SPEC §5: bodies up to at least 3 MiB (an object and its oldObject near etcd's 1.5 MiB limit).
MAX_BODY_BYTES = 8 * 1024 * 1024
#: Longest user value (name, namespace, kind, uid, operation) in a log line, in characters.
LOG_ECHO_LIMIT = 256


class ConfigurationError(ValueError):
    """The server cannot start with these options; the message says what to change."""


@dataclass
class ServerConfig:
    """How to run the server. Paths are files; times are seconds.

    ``metrics_port``: the plain-HTTP port of ``/metrics`` (None: no metrics listener).
    ``shutdown_delay``: after SIGTERM, seconds of serving while ``/readyz`` says not ready.
    ``shutdown_timeout``: then, seconds to drain before every connection is dropped. The pod's
    ``terminationGracePeriodSeconds`` must exceed the two together.
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


# -- answers ------------------------------------------------------------------------------------
def _error(status: int, message: str, **headers: str) -> web.Response:
    """A JSON error answer that also closes the connection."""
    response = web.json_response({"error": message}, status=status, headers=headers or None)
    response.force_close()
    return response


def _result(outcome: ReviewOutcome) -> str:
    if outcome.plan.invalid:
        return "invalid"
    if not outcome.plan.allowed:
        return "denied"
    return "patched" if outcome.patch else "allowed"


def _count(metrics: Metrics, outcome: ReviewOutcome, result: str) -> None:
    request = outcome.request
    metrics.requests.labels(kind_label(request.kind), operation_label(request.operation), result).inc()
    for change in outcome.plan.changes:
        metrics.changes.labels(rule_label(change.rule)).inc()
    for rule in outcome.plan.denied_rules:
        metrics.denials.labels(rule_label(rule)).inc()
    for rule in outcome.plan.warned_rules:
        metrics.warnings.labels(rule_label(rule)).inc()


def _refusal(request: web.Request) -> tuple[str, web.Response] | None:
    """(outcome, answer) for a POST /mutate refused on its headers alone, before any body byte."""
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding != "identity":
        return "content_encoding", _error(
            415,
            "request bodies must not be compressed (Content-Encoding is set); "
            "the API server sends AdmissionReview uncompressed",
            **{"Accept-Encoding": "identity"},
        )
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        return "body_too_large", _error(413, f"request body is over {MAX_BODY_BYTES} bytes")
    return None


def _refused(state: GovernorState, outcome: str, response: web.Response) -> web.Response:
    state.metrics.refused.labels(outcome).inc()
    log.warning("request refused", status=response.status, reason=outcome)
    return response


async def _expect(request: web.Request) -> web.StreamResponse | None:
    """``Expect: 100-continue``: refuse on the headers (413/415) instead of inviting the body."""
    refusal = _refusal(request)
    if refusal is not None:
        state = request.app[STATE_KEY]
        state.metrics.latency.labels(refusal[0]).observe(0.0)
        return _refused(state, *refusal)
    if request.headers.get("Expect", "").lower() != "100-continue":
        return _error(417, "only 'Expect: 100-continue' is understood")
    await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    request.writer.output_size = 0
    return None


async def _read_body(request: web.Request, state: GovernorState) -> tuple[str, web.Response] | bytes:
    refusal = _refusal(request)
    if refusal is not None:
        return refusal
    try:
        async with asyncio.timeout(state.config.limits.body_timeout):
            return await request.read()
    except TimeoutError:
        return "body_timeout", _error(408, f"request body not received within {state.config.limits.body_timeout:g} s")
    except web.HTTPRequestEntityTooLarge:
        return "body_too_large", _error(413, f"request body is over {MAX_BODY_BYTES} bytes")
    except (ConnectionError, RequestPayloadError):
        protocol = request.protocol
        if isinstance(protocol, GuardedHandler) and protocol.dropped is not None:
            # The server dropped it (at the connection cap, or at shutdown): counted there.
            return "connection_dropped", _error(503, f"connection dropped: {protocol.dropped}")
        # Nobody is left to read an answer; it is still counted and logged, once.
        return "client_disconnected", _error(400, "the client disconnected before sending the whole body")
    finally:
        if isinstance(request.protocol, GuardedHandler):
            request.protocol.body_received()


async def _admit(request: web.Request) -> web.Response:
    state: GovernorState = request.app[STATE_KEY]
    metrics = state.metrics
    started = time.perf_counter()
    metrics.in_flight.inc()
    state.in_flight += 1
    outcome_label = "error"
    try:
        if state.teams is None:
            outcome_label = "not_ready"
            return _error(503, "policies not loaded yet")
        raw = await _read_body(request, state)
        if isinstance(raw, tuple):
            outcome_label = raw[0]
            if outcome_label == "connection_dropped":
                return raw[1]
            return _refused(state, *raw)
        try:
            body = decode_body(raw)
            outcome = review(body, state.teams, state.namespace_lookup, state.inventory)
        except MalformedReview as exc:
            outcome_label = "malformed"
            metrics.malformed.inc()
            log.warning("malformed AdmissionReview", reason=str(exc))
            return web.json_response({"error": f"malformed AdmissionReview: {exc}"}, status=400)
        except Exception:
            # Never a silent pass: the API server applies the webhook's failurePolicy to a 500.
            metrics.internal_errors.inc()
            log.exception("internal error while reviewing; answered 500")
            return web.json_response({"error": "internal error in kueue-governor; see its log"}, status=500)
        outcome_label = _result(outcome)
        _count(metrics, outcome, outcome_label)
        req = outcome.request
        log.info(
            "admission",
            uid=clip(req.uid, LOG_ECHO_LIMIT),
            kind=clip(req.kind, LOG_ECHO_LIMIT),
            namespace=clip(req.namespace, LOG_ECHO_LIMIT),
            name=clip(req.name or _generate_name(req.object), LOG_ECHO_LIMIT),
            operation=clip(req.operation, LOG_ECHO_LIMIT),
            dry_run=req.dry_run,
            result=outcome_label,
            team=outcome.resolution.team.team if outcome.resolution.team else None,
            changes=[f"{c.rule}:{c.op}" for c in outcome.plan.changes],
            denials=[clip(m) for m in outcome.plan.denials],
            warnings=[clip(m) for m in outcome.plan.warnings],
            skipped=clip(outcome.plan.skipped, LOG_ECHO_LIMIT * 2) or None,
        )
        return web.json_response(outcome.response)
    finally:
        metrics.in_flight.dec()
        state.in_flight -= 1
        metrics.latency.labels(outcome_label).observe(time.perf_counter() - started)


def _generate_name(obj: Mapping[str, Any] | None) -> str:
    metadata = (obj or {}).get("metadata")
    value = metadata.get("generateName") if isinstance(metadata, Mapping) else None
    return value if isinstance(value, str) else ""


async def _healthz(_: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _readyz(request: web.Request) -> web.Response:
    """200 ``{"ready": true, ...}`` or 503 with the reasons; ``notices`` in both."""
    state = request.app[STATE_KEY]
    reasons = state.ready()
    body = {"ready": not reasons, "reasons": reasons, "notices": state.notices()}
    return web.json_response(body, status=503 if reasons else 200)


async def _metrics(request: web.Request) -> web.Response:
    payload = generate_latest(request.app[STATE_KEY].metrics.registry)
    return web.Response(body=payload, headers={"Content-Type": CONTENT_TYPE_LATEST})


STATE_KEY: web.AppKey[GovernorState] = web.AppKey("state", GovernorState)

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _guard(request: web.Request, handler: _Handler) -> web.StreamResponse:
    """Mark the connection busy (its header deadline met), answer errors in JSON, and close
    connections while shutting down so clients move to another replica."""
    protocol = request.protocol
    if isinstance(protocol, GuardedHandler):
        protocol.request_started()
    try:
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            allow = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
            response = web.json_response({"error": exc.reason}, status=exc.status, headers=allow)
        if request.app[STATE_KEY].shutting_down:
            response.force_close()
        return response
    finally:
        if isinstance(protocol, GuardedHandler):
            protocol.request_finished()


def make_app(state: GovernorState) -> web.Application:
    """The webhook port's application; ``client_max_size`` allows bodies up to :data:`MAX_BODY_BYTES`."""
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[_guard])
    app[STATE_KEY] = state
    app.router.add_post("/mutate", _admit, expect_handler=_expect)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    return app


def make_metrics_app(state: GovernorState) -> web.Application:
    """The plain-HTTP metrics port's application: ``/metrics``, ``/healthz``, ``/readyz``."""
    app = web.Application(client_max_size=1024, middlewares=[_guard])
    app[STATE_KEY] = state
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    return app


class JsonAccessLogger(AbstractAccessLogger):
    """aiohttp's access log as structured events (debug level): method, path, status, seconds.

    The path is cut and its query dropped; no header value is logged.
    """

    def log(self, request: Any, response: Any, time: float) -> None:
        self.logger.debug(
            "access",
            extra={
                "method": clip(request.method, 16),
                "path": clip(request.rel_url.path, 128),
                "status": response.status,
                "seconds": round(time, 6),
            },
        )

    @property
    def enabled(self) -> bool:
        return self.logger.isEnabledFor(logging.DEBUG)


def _handler_args(config: ServerConfig) -> dict[str, Any]:
    """aiohttp request-handler settings shared by both ports."""
    return {
        "keepalive_timeout": config.limits.idle_timeout,
        "lingering_time": config.limits.lingering_time,
        "auto_decompress": False,  # a compressed body is refused (415), never inflated
        "access_log": logging.getLogger("aiohttp.access"),
        "access_log_class": JsonAccessLogger,
        "max_line_size": 8190,
        "max_field_size": 8190,
        "max_headers": 64,
    }


async def _watch_files(state: GovernorState, context: ssl.SSLContext) -> None:
    """Reload the certificate pair and the policy file whenever they change on disk.

    A new pair is loaded into a new context and the listening context hands each new handshake to
    it. Loading into the live context instead would break it on a mismatched pair (cert rotated,
    key not yet): OpenSSL drops the old key as soon as the new certificate is set.
    """
    config = state.config
    state.changed(config.cert_file, config.key_file)
    state.changed(state.policy_source())
    while True:
        await asyncio.sleep(config.reload_interval)
        if state.changed(config.cert_file, config.key_file):
            try:
                fresh = make_ssl_context(config.cert_file, config.key_file)
            except (ssl.SSLError, OSError) as exc:
                # Mid-rotation the cert and key may disagree for a moment: keep serving the old pair.
                state.metrics.cert_reloads.labels("error").inc()
                log.warning(
                    "certificate reload failed; serving the previous one",
                    error=describe_pair_error(config.cert_file, config.key_file, exc),
                )
                state._mtimes.pop(config.cert_file, None)
            else:
                context.sni_callback = serve_certificate_of(fresh)
                state.metrics.cert_reloads.labels("ok").inc()
                log.info("certificate reloaded", cert=str(config.cert_file))
        if state.changed(state.policy_source()):
            state.load_policies()


async def _start_caches(state: GovernorState) -> Any:
    from webhook.kube.cache import connect, inventory_of, namespace_cache, namespace_labels, node_cache

    api = await connect(state.config.kubeconfig)
    namespaces, nodes = namespace_cache(api), node_cache(api)
    state.caches = [namespaces, nodes]
    state.namespace_lookup = namespace_labels(namespaces)
    loop = asyncio.get_running_loop()
    pending: list[asyncio.TimerHandle] = []

    def rebuild() -> None:
        pending.clear()
        state.inventory = inventory_of(nodes)

    def nodes_changed() -> None:
        # The first list builds the inventory at once (readiness waits for it); later bursts of
        # node events rebuild it once, debounced, off the request path.
        if state.inventory is None:
            rebuild()
        elif not pending:
            pending.append(loop.call_later(0.5, rebuild))

    nodes.on_change = nodes_changed
    for cache in state.caches:
        cache.start()
    return api


async def _drain(state: GovernorState, tracker: ConnectionTracker, listener: asyncio.AbstractServer) -> None:
    """SIGTERM: not ready for ``shutdown_delay`` while still serving (every answer closes its
    connection), then stop accepting, close idle connections and drain for at most ``shutdown_timeout``."""
    config = state.config
    state.shutting_down = True
    log.info(
        "shutting down: not ready, still serving",
        delay_s=config.shutdown_delay,
        timeout_s=config.shutdown_timeout,
    )
    # Idle kept-alive connections are left open during the delay: closing one races with a request
    # the client may be sending on it. Each answer closes its connection instead (_guard).
    await asyncio.sleep(config.shutdown_delay)
    listener.close()
    tracker.close_waiting()
    log.info("stopped accepting; draining", connections=len(tracker.connections), in_flight=state.in_flight)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(tracker.empty.wait(), config.shutdown_timeout)
    if tracker.connections:
        log.warning("drain deadline passed; dropping connections", connections=len(tracker.connections))
        tracker.abort_all()


async def run_server(config: ServerConfig, stop: asyncio.Event, started: asyncio.Event | None = None) -> None:
    """Serve until ``stop`` is set, then shut down gracefully (see :func:`_drain`); returns within
    ``shutdown_delay + shutdown_timeout`` (plus about a second) of ``stop``.

    Raises:
        PlatformError / InputError: the policy or an input file is invalid at start-up.
        ConfigurationError: options that cannot work together, or no usable kubeconfig.
        ssl.SSLError / OSError: the certificate pair cannot be loaded or a port is taken.
    """
    metrics = Metrics()
    state = GovernorState(config, metrics)
    state.load_policies()
    state.load_static_inputs()
    assert state.teams is not None
    if state.teams.needs_namespace_labels and not (config.watch_cluster or config.namespaces_file):
        raise ConfigurationError(
            "some teams select namespaces by labels: give --watch-cluster (or --namespaces FILE) so the "
            "server knows namespace labels; without them those namespaces would pass unmutated"
        )
    context = make_ssl_context(config.cert_file, config.key_file)
    state.certificate_loaded = True
    try:
        api = await _start_caches(state) if config.watch_cluster else None
    except (ConfigException, TypeError, ValueError, KeyError, AttributeError) as exc:  # unusable kubeconfig
        raise ConfigurationError(f"cannot reach the API server for --watch-cluster: {exc}") from None
    loop = asyncio.get_running_loop()
    handler_args = _handler_args(config)
    runner = web.AppRunner(make_app(state), shutdown_timeout=1.0, **handler_args)
    await runner.setup()
    assert runner.server is not None
    manager = runner.server
    tracker = ConnectionTracker(config.limits, metrics)

    def make_handler() -> GuardedHandler:
        return GuardedHandler(manager, tracker, loop=loop, **handler_args)

    listener = await loop.create_server(
        lambda: TlsGate(tracker, context, make_handler), config.host, config.port, reuse_address=True, backlog=128
    )
    metrics_runner: web.AppRunner | None = None
    if config.metrics_port is not None:
        metrics_runner = web.AppRunner(make_metrics_app(state), shutdown_timeout=1.0, **handler_args)
        await metrics_runner.setup()
        await web.TCPSite(metrics_runner, config.metrics_host or config.host, config.metrics_port).start()
    watcher = asyncio.create_task(_watch_files(state, context))
    log.info(
        "serving",
        host=config.host,
        port=config.port,
        metrics_port=config.metrics_port,
        policy=str(state.policy_source()),
        pid=os.getpid(),
    )
    if started is not None:
        started.set()
    try:
        await stop.wait()
        await _drain(state, tracker, listener)
    finally:
        listener.close()
        tracker.abort_all()
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        await runner.cleanup()
        if metrics_runner is not None:
            await metrics_runner.cleanup()
        for cache in state.caches:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(cache.stop(), 2.0)
        if api is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(api.close(), 2.0)
        log.info("stopped")


def serve(config: ServerConfig) -> None:
    """Run the server in the foreground; SIGTERM or SIGINT stops it gracefully."""

    async def main() -> None:
        stop, started = asyncio.Event(), asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        server = asyncio.create_task(run_server(config, stop, started))
        await asyncio.wait({server, asyncio.create_task(started.wait())}, return_when=asyncio.FIRST_COMPLETED)
        gc.freeze()  # what start-up made lives as long as the process: later collections skip it
        await server

    asyncio.run(main())
