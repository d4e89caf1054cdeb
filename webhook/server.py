"""The admission webhook server: aiohttp over TLS 1.2+.

Routes: ``POST /mutate`` (AdmissionReview v1 and v1beta1), ``GET /healthz`` (process alive),
``GET /readyz`` (certificate, policies and caches loaded), ``GET /metrics`` (Prometheus).
The handler is the transport only; decisions come from :func:`webhook.core.review.review`.

Certificates and the policy file are re-read when they change on disk (SPEC §5, §7), so a cert
rotation or a ConfigMap update needs no restart. SIGTERM drains in-flight requests before exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web
from kubernetes_asyncio.config import ConfigException
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from webhook.core.admission import MalformedReview, decode_body
from webhook.core.inventory import NodeInventory
from webhook.core.platform import PlatformError
from webhook.core.resolve import TeamIndex
from webhook.core.review import ReviewOutcome, review
from webhook.metrics import Metrics
from webhook.sources import InputError, load_namespace_labels, load_nodes, load_policies

__all__ = [
    "MAX_BODY_BYTES",
    "ConfigurationError",
    "GovernorState",
    "ServerConfig",
    "make_app",
    "make_ssl_context",
    "run_server",
    "serve",
]

log = structlog.get_logger("kgov.server")

#: SPEC §5: bodies up to at least 3 MiB (an object and its oldObject near etcd's 1.5 MiB limit).
MAX_BODY_BYTES = 8 * 1024 * 1024


class ConfigurationError(ValueError):
    """The server cannot start with these options; the message says what to change."""


@dataclass
class ServerConfig:
    """How to run the server. Paths are files; times are seconds."""

    cert_file: Path
    key_file: Path
    platform: Path | None = None
    policy: Path | None = None
    host: str = "0.0.0.0"
    port: int = 8443
    namespaces_file: Path | None = None
    nodes_file: Path | None = None
    kubeconfig: str | None = None
    watch_cluster: bool = False
    extra_excluded: list[str] = field(default_factory=list)
    reload_interval: float = 2.0
    shutdown_timeout: float = 20.0


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
        self._mtimes: dict[Path, float] = {}

    # -- policy ------------------------------------------------------------------------------
    def policy_source(self) -> Path:
        source = self.config.platform or self.config.policy
        assert source is not None
        return source

    def load_policies(self) -> None:
        """(Re)load policies; on failure keep the previous ones and log every problem."""
        try:
            policies = load_policies(self.config.platform, self.config.policy, self.config.extra_excluded)
        except (PlatformError, InputError) as exc:
            self.metrics.policy_reloads.labels("error").inc()
            log.error("policy load failed; keeping the previous policies", error=str(exc))
            if self.teams is None:
                raise
            return
        self.teams = TeamIndex(policies)
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
        if self.teams is None:
            reasons.append("policies not loaded")
        if not self.certificate_loaded:
            reasons.append("serving certificate not loaded")
        reasons.extend(f"{cache.name} cache not synced" for cache in self.caches if not cache.synced.is_set())
        if self.config.watch_cluster and self.inventory is None:
            reasons.append("node inventory not built")
        return reasons

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


def make_ssl_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """A server TLS context, TLS 1.2 minimum.

    Raises:
        ssl.SSLError / OSError: unreadable or mismatched certificate and key.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert_file), str(key_file))
    return context


def _result(outcome: ReviewOutcome) -> str:
    if outcome.plan.invalid:
        return "invalid"
    if not outcome.plan.allowed:
        return "denied"
    return "patched" if outcome.patch else "allowed"


def _count(metrics: Metrics, outcome: ReviewOutcome) -> None:
    request = outcome.request
    metrics.requests.labels(request.kind, request.operation, _result(outcome)).inc()
    for change in outcome.plan.changes:
        metrics.changes.labels(change.rule).inc()
    for rule in outcome.plan.denied_rules:
        metrics.denials.labels(rule).inc()
    for rule in outcome.plan.warned_rules:
        metrics.warnings.labels(rule).inc()


async def _admit(request: web.Request) -> web.Response:
    state: GovernorState = request.app[STATE_KEY]
    metrics = state.metrics
    started = time.perf_counter()
    metrics.in_flight.inc()
    state.in_flight += 1
    try:
        if state.teams is None:
            return web.json_response({"error": "policies not loaded yet"}, status=503)
        raw = await request.read()  # 413 (HTTPRequestEntityTooLarge) past MAX_BODY_BYTES
        try:
            body = decode_body(raw)
            outcome = review(body, state.teams, state.namespace_lookup, state.inventory)
        except MalformedReview as exc:
            metrics.malformed.inc()
            log.warning("malformed AdmissionReview", reason=str(exc))
            return web.json_response({"error": f"malformed AdmissionReview: {exc}"}, status=400)
        except Exception:
            # Never a silent pass: the API server applies the webhook's failurePolicy to a 500.
            metrics.internal_errors.inc()
            log.exception("internal error while reviewing; answered 500")
            return web.json_response({"error": "internal error in kueue-governor; see its log"}, status=500)
        _count(metrics, outcome)
        req = outcome.request
        log.info(
            "admission",
            uid=req.uid,
            kind=req.kind,
            namespace=req.namespace,
            name=req.name or _generate_name(req.object),
            operation=req.operation,
            dry_run=req.dry_run,
            result=_result(outcome),
            team=outcome.resolution.team.team if outcome.resolution.team else None,
            changes=[f"{c.rule}:{c.op}" for c in outcome.plan.changes],
            denials=outcome.plan.denials,
            warnings=outcome.plan.warnings,
            skipped=outcome.plan.skipped or None,
        )
        return web.json_response(outcome.response)
    finally:
        metrics.in_flight.dec()
        state.in_flight -= 1
        metrics.latency.observe(time.perf_counter() - started)


def _generate_name(obj: Mapping[str, Any] | None) -> str:
    metadata = (obj or {}).get("metadata")
    value = metadata.get("generateName") if isinstance(metadata, Mapping) else None
    return value if isinstance(value, str) else ""


async def _healthz(_: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _readyz(request: web.Request) -> web.Response:
    reasons = request.app[STATE_KEY].ready()
    if reasons:
        return web.Response(status=503, text="; ".join(reasons))
    return web.Response(text="ok")


async def _metrics(request: web.Request) -> web.Response:
    payload = generate_latest(request.app[STATE_KEY].metrics.registry)
    return web.Response(body=payload, headers={"Content-Type": CONTENT_TYPE_LATEST})


STATE_KEY: web.AppKey[GovernorState] = web.AppKey("state", GovernorState)


def make_app(state: GovernorState) -> web.Application:
    """The aiohttp application; ``client_max_size`` allows bodies up to :data:`MAX_BODY_BYTES`."""
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[STATE_KEY] = state
    app.router.add_post("/mutate", _admit)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)
    return app


def _serve_certificate_of(fresh: ssl.SSLContext) -> Callable[[ssl.SSLObject, str | None, ssl.SSLContext], None]:
    """An SNI callback (OpenSSL runs it on every handshake, SNI or not) that switches to ``fresh``."""

    def switch(ssl_object: ssl.SSLObject, _server_name: str | None, _context: ssl.SSLContext) -> None:
        ssl_object.context = fresh

    return switch


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
                log.warning("certificate reload failed; serving the previous one", error=str(exc))
                state._mtimes.pop(config.cert_file, None)
            else:
                context.sni_callback = _serve_certificate_of(fresh)
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


async def run_server(config: ServerConfig, stop: asyncio.Event, started: asyncio.Event | None = None) -> None:
    """Serve until ``stop`` is set, then drain in-flight requests (up to ``shutdown_timeout``).

    Raises:
        PlatformError / InputError: the policy or an input file is invalid at start-up.
        ConfigurationError: options that cannot work together, or no usable kubeconfig.
        ssl.SSLError / OSError: the certificate pair cannot be loaded or the port is taken.
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
    runner = web.AppRunner(make_app(state), access_log=None, shutdown_timeout=config.shutdown_timeout)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port, ssl_context=context)
    await site.start()
    watcher = asyncio.create_task(_watch_files(state, context))
    log.info("serving", host=config.host, port=config.port, policy=str(state.policy_source()))
    if started is not None:
        started.set()
    try:
        await stop.wait()
    finally:
        log.info("shutting down; draining in-flight requests", timeout_s=config.shutdown_timeout)
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        # Stop accepting, then let the requests already received finish, bodies still arriving
        # included: aiohttp's own shutdown (runner.cleanup) stops reading open connections at once.
        await site.stop()
        deadline = time.monotonic() + config.shutdown_timeout
        while state.in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await runner.cleanup()
        for cache in state.caches:
            await cache.stop()
        if api is not None:
            await api.close()


def serve(config: ServerConfig) -> None:
    """Run the server in the foreground; SIGTERM or SIGINT stops it gracefully."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await run_server(config, stop)

    asyncio.run(main())
