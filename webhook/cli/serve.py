"""``kgov serve``: the admission webhook server (:mod:`webhook.serve`) from the command line."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import click

from webhook.cli.common import (
    configmap_reference,
    fail,
    namespaces_option,
    nodes_option,
    platform_option,
    policy_option,
    seconds_option,
)
from webhook.cli.options import file_option
from webhook.core.platform.platform import PlatformError
from webhook.kube.files import InputError
from webhook.serve.logs import configure_logging


@click.command("serve")
@platform_option
@policy_option
@click.option(
    "--policy-configmap",
    metavar="[NAMESPACE/]NAME",
    help="Watch this ConfigMap (key policy.json, as `kgov generate` and the Helm chart write it) for the "
    "policy instead of a file; NAMESPACE defaults to $POD_NAMESPACE. A change is served within seconds; an "
    "invalid one is rejected with a Warning Event on the ConfigMap, and the last good policy stays.",
)
@file_option("--tls-cert-file", required=True)
@file_option("--tls-private-key-file", required=True)
@click.option("--host", default="0.0.0.0", show_default=True)
@click.option("--port", default=8443, show_default=True, type=click.IntRange(1, 65535))
@namespaces_option
@nodes_option
@click.option(
    "--watch-cluster/--no-watch-cluster",
    default=False,
    help="Keep namespaces and nodes cached from the API server (list + watch).",
)
@click.option(
    "--topology-widening",
    metavar="[NAMESPACE/]LEASE",
    help="With --watch-cluster: widen the required topology of workloads pending on topology past their "
    "team's patience, one level at a time, then to preferred; the replica holding this Lease (NAMESPACE "
    "defaults to $POD_NAMESPACE) acts. Needs get/list/watch/patch on Workloads, get/patch on the workload "
    "kinds, Events and the Lease.",
)
@click.option(
    "--kubeconfig",
    help="Kubeconfig for --watch-cluster and --policy-configmap (default: in-cluster service account).",
)
@click.option(
    "--exclude-namespace",
    multiple=True,
    help="Namespace never mutated (repeatable). The server's own namespace (env POD_NAMESPACE) always is.",
)
@click.option(
    "--log-level", default="info", show_default=True, type=click.Choice(["debug", "info", "warning", "error"])
)
@click.option(
    "--metrics-port",
    default=8080,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Plain-HTTP port of /metrics (and /healthz, /readyz); 0: no metrics listener.",
)
@click.option("--metrics-host", help="Address of the metrics port (default: --host).")
@seconds_option(
    "--shutdown-delay",
    5.0,
    0,
    "After SIGTERM, seconds of serving while /readyz says not ready (endpoints drop the pod first).",
)
@seconds_option(
    "--shutdown-timeout",
    20.0,
    0,
    "Then, seconds to drain before every connection is dropped. terminationGracePeriodSeconds must "
    "exceed --shutdown-delay + --shutdown-timeout.",
)
@seconds_option("--header-timeout", 10.0, 0.1, "Seconds for the TLS handshake, and for a request's line and headers.")
@seconds_option("--body-timeout", 10.0, 0.1, "Seconds for a request body once its headers are in.")
@seconds_option(
    "--idle-timeout",
    120.0,
    0.1,
    "Seconds a kept-alive connection may stay without a request (above the API server's 90 s).",
)
@click.option(
    "--max-connections",
    default=256,
    show_default=True,
    type=click.IntRange(1),
    help="Open connections on the webhook port; at the cap the longest-waiting idle one is closed.",
)
@click.option(
    "--reuse-port/--no-reuse-port",
    default=False,
    show_default=True,
    help="Listen with SO_REUSEPORT, so that several kgov serve processes share the webhook port "
    "(the kernel spreads new connections over them; give each its own --metrics-port).",
)
def serve_command(
    platform: Path | None,
    policy: Path | None,
    policy_configmap: str | None,
    tls_cert_file: Path,
    tls_private_key_file: Path,
    host: str,
    port: int,
    namespaces_file: Path | None,
    nodes_file: Path | None,
    watch_cluster: bool,
    topology_widening: str | None,
    kubeconfig: str | None,
    exclude_namespace: tuple[str, ...],
    log_level: str,
    metrics_port: int,
    metrics_host: str | None,
    shutdown_delay: float,
    shutdown_timeout: float,
    header_timeout: float,
    body_timeout: float,
    idle_timeout: float,
    max_connections: int,
    reuse_port: bool,
) -> None:
    """Run the mutating admission webhook over TLS (POST /mutate, /healthz, /readyz), with /metrics
    on a separate plain-HTTP port."""
    from webhook.serve.server import ConfigurationError, ConnectionLimits, ServerConfig, serve
    from webhook.serve.tlsconfig import describe_pair_error

    if [platform, policy, policy_configmap].count(None) != 2:
        fail("give exactly one of --platform, --policy or --policy-configmap")
    own_namespace = os.environ.get("POD_NAMESPACE")
    configmap = configmap_reference(policy_configmap, own_namespace) if policy_configmap is not None else None
    for option, path in (("--tls-cert-file", tls_cert_file), ("--tls-private-key-file", tls_private_key_file)):
        if not path.is_file():
            fail(f"{option} {path}: no such file")
    if kubeconfig is not None and not Path(kubeconfig).is_file():
        fail(f"--kubeconfig {kubeconfig}: no such file")
    if kubeconfig is not None and not (watch_cluster or configmap):
        fail("--kubeconfig is used by --watch-cluster and --policy-configmap only; add one of them")
    if topology_widening is not None and not watch_cluster:
        fail("--topology-widening needs --watch-cluster (it reads the node and namespace caches)")
    lease = (
        configmap_reference(topology_widening, own_namespace, "--topology-widening")
        if topology_widening is not None
        else None
    )
    excluded = [*exclude_namespace, *([own_namespace] if own_namespace else [])]
    configure_logging(log_level)
    config = ServerConfig(
        cert_file=tls_cert_file,
        key_file=tls_private_key_file,
        platform=platform,
        policy=policy,
        policy_configmap=configmap,
        host=host,
        port=port,
        namespaces_file=namespaces_file,
        nodes_file=nodes_file,
        kubeconfig=kubeconfig,
        watch_cluster=watch_cluster,
        extra_excluded=excluded,
        metrics_host=metrics_host,
        metrics_port=metrics_port or None,
        shutdown_delay=shutdown_delay,
        shutdown_timeout=shutdown_timeout,
        reuse_port=reuse_port,
        widening_lease=lease,
        limits=ConnectionLimits(
            header_timeout=header_timeout,
            body_timeout=body_timeout,
            idle_timeout=idle_timeout,
            max_connections=max_connections,
        ),
    )
    try:
        serve(config)
    except (PlatformError, InputError, ConfigurationError) as exc:
        fail(str(exc))
    except ssl.SSLError as exc:
        fail(
            f"cannot load the serving certificate pair (--tls-cert-file {tls_cert_file}, "
            f"--tls-private-key-file {tls_private_key_file}): "
            f"{describe_pair_error(tls_cert_file, tls_private_key_file, exc)}"
        )
    except OSError as exc:
        fail(f"cannot serve on {host}:{port} (--port): {exc}")
