"""The admission webhook server: aiohttp over TLS 1.2+, and a plain-HTTP port for metrics.

Webhook port (TLS): ``POST /mutate`` (AdmissionReview v1 and v1beta1), ``GET /healthz`` (process
alive), ``GET /readyz`` (certificate, policies and caches loaded; not while shutting down).
Metrics port (plain HTTP, so a NetworkPolicy can keep scrapers off the webhook port):
``GET /metrics`` (Prometheus), ``/healthz`` and ``/readyz`` again. The handler is the transport
only; decisions come from :func:`webhook.core.admission.review.review`.

What a client cannot do (issue "hostile and broken clients"): send a compressed body (415, never
decompressed), a body over :data:`MAX_BODY_BYTES` (413, also refused before ``100-continue``),
hold a connection without sending (header, body and idle deadlines, a connection cap:
:mod:`webhook.serve.connections`), add a metric series (closed label sets: :mod:`webhook.serve.metrics`),
or make a log line or an answer of megabytes (echoed values cut: :func:`webhook.core.admission.envelope.clip`).
Every error answer is JSON.

Certificates and the policy file are re-read when they change on disk (SPEC §5, §7); a policy
ConfigMap (``--policy-configmap``) is watched (:mod:`webhook.kube.policy_watch`). On SIGTERM
the server reports not ready but keeps serving for ``shutdown_delay`` (so endpoints drop it
first), then stops accepting, drains, and exits within ``shutdown_timeout``, whatever clients do.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import signal
import ssl
from typing import Any

import structlog
from aiohttp import web
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import ConfigException

from webhook.kube.client import ClusterError
from webhook.serve.connections import ConnectionLimits, ConnectionTracker, GuardedHandler, TlsGate
from webhook.serve.handlers import MAX_BODY_BYTES, JsonAccessLogger, make_app, make_metrics_app
from webhook.serve.metrics import Metrics
from webhook.serve.state import ConfigurationError, GovernorState, ServerConfig
from webhook.serve.tlsconfig import describe_pair_error, make_ssl_context, serve_certificate_of

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
    policy_file = state.policy_source()  # None: the policy comes from a ConfigMap, watched
    state.changed(config.cert_file, config.key_file)
    if policy_file is not None:
        state.changed(policy_file)
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
        if policy_file is not None and state.changed(policy_file):
            state.load_policies()


def _count_lists(state: GovernorState, cache: Any) -> None:
    cache.on_list = lambda reason: state.metrics.cache_lists.labels(cache.name, reason).inc()


async def _start_caches(state: GovernorState) -> Any:
    """Connect to the API server and start the policy ConfigMap's watch (--policy-configmap) and the
    namespace and node caches (--watch-cluster); returns the API client (None: neither is asked)."""
    from webhook.kube.cache import connect, inventory_of, namespace_cache, namespace_labels, node_cache
    from webhook.kube.policy_watch import PolicyConfigMapWatch

    config = state.config
    if not (config.watch_cluster or config.policy_configmap):
        return None
    api = await connect(config.kubeconfig)
    if config.policy_configmap is not None:
        namespace, name = config.policy_configmap
        state.policy_watch = PolicyConfigMapWatch(
            api,
            namespace,
            name,
            functools.partial(state.take_policies, "configmap"),
            lambda: state.teams is not None,
            config.extra_excluded,
        )
        state.caches.append(state.policy_watch.cache)
        _count_lists(state, state.policy_watch.cache)
        state.policy_watch.start()
    if not config.watch_cluster:
        return api
    namespaces, nodes = namespace_cache(api), node_cache(api)
    state.caches.extend([namespaces, nodes])
    state.namespace_lookup = namespace_labels(namespaces)
    state.namespace_wait = namespaces.wait_for_object
    for cache in (namespaces, nodes):
        _count_lists(state, cache)
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
    namespaces.start()
    nodes.start()
    if config.widening_lease is not None:
        from webhook.kube.widener import TopologyWidener, whoami

        try:
            state.governor_user = await whoami(api)
        except ApiException as exc:  # widening is an extra: the webhook serves without it
            log.warning("topology widening off: the API server did not say who this server is", status=exc.status)
            return api
        state.widener = TopologyWidener(
            api, lambda: state.teams, state.namespace_lookup, lambda: state.inventory, config.widening_lease
        )
        state.widener.start()
        log.info("topology widening on", user=state.governor_user, lease="/".join(config.widening_lease))
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
        ConfigurationError also: the metrics port (``--metrics-port``) is taken.
        ssl.SSLError / OSError: the certificate pair cannot be loaded or the webhook port is taken.
    """
    metrics = Metrics()
    state = GovernorState(config, metrics)
    if config.policy_configmap is None:
        state.load_policies()
        assert state.teams is not None
    state.load_static_inputs()
    context = make_ssl_context(config.cert_file, config.key_file)
    state.certificate_loaded = True
    try:
        api = await _start_caches(state)
    except (ClusterError, ConfigException, ApiException, TypeError, ValueError, KeyError, AttributeError) as exc:
        which = "--watch-cluster" if config.watch_cluster else "--policy-configmap"
        raise ConfigurationError(f"cannot reach the API server for {which}: {exc}") from None
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
        lambda: TlsGate(tracker, context, make_handler),
        config.host,
        config.port,
        reuse_address=True,
        reuse_port=config.reuse_port or None,
        backlog=128,
    )
    metrics_runner: web.AppRunner | None = None
    if config.metrics_port is not None:
        metrics_runner = web.AppRunner(make_metrics_app(state), shutdown_timeout=1.0, **handler_args)
        await metrics_runner.setup()
        metrics_host = config.metrics_host or config.host
        try:
            await web.TCPSite(metrics_runner, metrics_host, config.metrics_port).start()
        except OSError as exc:  # the webhook port is bound already: name the one that clashed
            listener.close()
            await metrics_runner.cleanup()
            await runner.cleanup()
            await _stop_sources(state, api)
            raise ConfigurationError(
                f"cannot serve metrics on {metrics_host}:{config.metrics_port} (--metrics-port): {exc}"
            ) from None
    watcher = asyncio.create_task(_watch_files(state, context))
    log.info(
        "serving",
        host=config.host,
        port=config.port,
        metrics_port=config.metrics_port,
        policy=state.policy_source_name(),
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
        await _stop_sources(state, api)
        log.info("stopped")


async def _stop_sources(state: GovernorState, api: Any) -> None:
    """Stop the cluster caches, the policy ConfigMap watch, the topology widening and the API client
    (2 s each at most)."""
    for cache in state.caches:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(cache.stop(), 2.0)
    for source in (state.policy_watch, state.widener):
        if source is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(source.stop(), 2.0)
    if api is not None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(api.close(), 2.0)


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
