"""``kgov serve --certs-secret``: the server keeps its certificates in the cluster (``certs.mode:
in-cluster``), so the chart's render carries no key material (SPEC §7, §8).

Each replica, at start and then every ``interval`` seconds (:meth:`CertificateKeeper.sync`):

1. reads the Secret; when there is none, makes a CA and a serving pair and creates it. Creation is
   create-if-absent: of replicas starting together one wins, the others get ``409 AlreadyExists``
   and read the winner's Secret, so every replica serves the same pair;
2. publishes the Secret's CA bundle in the ``caBundle`` of its webhook configurations, each patch
   tested against the configuration it read. The configuration carries the bundle's serial
   (annotation ``kueue-governor.io/ca-bundle-serial``, the time the bundle was made): a replica
   that read the Secret before another one changed it never puts an older bundle back;
3. writes the serving pair to ``cert_file``/``key_file`` once the published bundle trusts its CA
   (certificate first, each in one rename; the server reloads them, keeping the previous pair
   until the two match);
4. takes the next step of :func:`webhook.certs.rotation.next_step` (a new CA, an expired CA out of
   the bundle, a new serving pair once the published bundle trusts its CA) with an update of the
   Secret at the version it read; on ``409 Conflict`` another replica took a step first, and the
   next round reads it.

RBAC it needs: ``get`` and ``update`` on that Secret (``resourceNames``), ``create`` on Secrets in
its namespace, ``get`` and ``patch`` on its webhook configurations (``resourceNames``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import ConfigException

from webhook.certs.pki import load_certificate, write_private
from webhook.certs.rotation import Material, Settings, initial_material, next_step, trusted_by
from webhook.certs.store import split_bundle
from webhook.kube.cache import connect
from webhook.kube.client import ClusterError

__all__ = ["SERIAL", "CertificateKeeper", "KeeperConfig"]

log = structlog.get_logger("kgov.certs")

#: Annotation of the Secret and of each webhook configuration: the serial of the CA bundle
#: (nanoseconds since the epoch when it was made), so that an older bundle never replaces a newer one.
SERIAL = "kueue-governor.io/ca-bundle-serial"
_TRANSIENT = (TimeoutError, OSError, aiohttp.ClientError)


@dataclass(frozen=True)
class KeeperConfig:
    """Where the certificates live: the Secret ``namespace``/``secret``, the webhook configurations
    whose caBundle the server publishes (``mutating``, ``validating``: names), the certificate
    ``settings`` and the seconds between two rounds (``interval``)."""

    namespace: str
    secret: str
    settings: Settings
    mutating: list[str] = field(default_factory=list)
    validating: list[str] = field(default_factory=list)
    interval: float = 30.0
    #: Seconds a new bundle is published before a serving pair of its new CA is issued, so every
    #: API server has seen the bundle (its informers) before any replica serves that pair.
    settle: float = 30.0


class KeeperError(RuntimeError):
    """A round could not finish (the message names the object and the API server's answer)."""


def _serial(metadata: Any) -> int:
    annotations = (metadata.annotations if metadata is not None else None) or {}
    try:
        return int(annotations.get(SERIAL, "0"))
    except ValueError:
        return 0


def _issuer(material: Material) -> bytes:
    """The CA of the bundle that signed the serving pair (PEM), or the current CA when none did."""
    leaf = load_certificate(material.tls_crt)
    for ca in split_bundle(material.ca_bundle):
        with contextlib.suppress(Exception):  # InvalidSignature, ValueError: another CA
            leaf.verify_directly_issued_by(load_certificate(ca))
            return ca
    return material.ca_crt


class CertificateKeeper:
    """One replica's share of the in-cluster certificates (see the module docstring)."""

    def __init__(self, config: KeeperConfig, cert_file: Path, key_file: Path, kubeconfig: str | None = None) -> None:
        self.config = config
        self.cert_file = cert_file
        self.key_file = key_file
        self.kubeconfig = kubeconfig
        self._name = f"{config.namespace}/{config.secret}"
        self.api: client.ApiClient | None = None

    @property
    def core(self) -> client.CoreV1Api:
        assert self.api is not None, "start() first"
        return client.CoreV1Api(self.api)

    @property
    def registration(self) -> client.AdmissionregistrationV1Api:
        assert self.api is not None, "start() first"
        return client.AdmissionregistrationV1Api(self.api)

    async def _read_secret(self) -> Any:
        """The Secret, or None when it does not exist."""
        try:
            return await self.core.read_namespaced_secret(self.config.secret, self.config.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise KeeperError(f"Secret {self._name}: cannot read it ({exc.status} {exc.reason})") from None

    def _body(self, material: Material, serial: int, resource_version: str | None = None) -> Any:
        """The Secret as a plain dict (the client sends it as it is)."""
        metadata: dict[str, Any] = {
            "name": self.config.secret,
            "namespace": self.config.namespace,
            "labels": {"app.kubernetes.io/managed-by": "kueue-governor", "app.kubernetes.io/component": "webhook"},
            "annotations": {SERIAL: str(serial)},
        }
        if resource_version is not None:
            metadata["resourceVersion"] = resource_version
        return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "type": "Opaque", "data": material.data()}

    async def _current(self) -> tuple[Material, int, str]:
        """(material, serial, resourceVersion) of the Secret, created first when absent.

        A Secret created while a bundle is published already (the Secret was deleted) keeps that
        bundle's CAs and starts without a pair, as does a Secret whose CA no longer parses: the
        pair of the new CA comes once the new bundle is out (:func:`next_step`).
        """
        secret = await self._read_secret()
        if secret is None:
            held = await self._held()
            material = initial_material(self.config.settings, keep=held, with_pair=not held)
            try:
                await self.core.create_namespaced_secret(self.config.namespace, self._body(material, time.time_ns()))
                log.info("created the certificate Secret", secret=self.config.secret)
            except ApiException as exc:
                if exc.status != 409:
                    raise KeeperError(f"Secret {self._name}: cannot create it ({exc.status} {exc.reason})") from None
                log.info("another replica created the certificate Secret first", secret=self.config.secret)
            secret = await self._read_secret()
            if secret is None:
                raise KeeperError(f"Secret {self._name}: gone right after its creation")
        try:
            material = Material.from_data(secret.data)
        except ValueError as exc:
            log.warning(
                "the certificate Secret has no usable CA; making one", secret=self.config.secret, error=str(exc)
            )
            material = initial_material(self.config.settings, keep=await self._held(), with_pair=False)
            await self._update(material, time.time_ns(), secret.metadata.resource_version)
            raise KeeperError("the certificate Secret got a new CA; reading it again") from None
        return material, _serial(secret.metadata), secret.metadata.resource_version

    async def _held(self) -> bytes:
        """The PEM bundles the webhook configurations hold now, joined (b"" when none)."""
        held: list[bytes] = []
        for kind, name, read, _ in self._targets():
            try:
                current = await read(name)
            except ApiException as exc:
                raise KeeperError(f"{kind} {name}: cannot read it ({exc.status} {exc.reason})") from None
            for webhook in current.webhooks or []:
                bundle = webhook.client_config.ca_bundle if webhook.client_config else None
                if bundle:
                    held.append(base64.b64decode(bundle))
        return b"".join(held)

    async def _update(self, material: Material, serial: int, resource_version: str) -> bool:
        """Replace the Secret at ``resource_version``; False when another replica changed it first."""
        body = self._body(material, serial, resource_version)
        try:
            await self.core.replace_namespaced_secret(self.config.secret, self.config.namespace, body)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise KeeperError(f"Secret {self._name}: cannot update it ({exc.status} {exc.reason})") from None
        return True

    def _write_files(self, material: Material) -> bool:
        """Write the serving pair when it differs from the files; True when it did. (The caller
        checks first that the published bundle trusts the pair's CA.)"""
        current = [path.read_bytes() if path.is_file() else b"" for path in (self.cert_file, self.key_file)]
        if current == [material.tls_crt, material.tls_key]:
            return False
        self.cert_file.parent.mkdir(parents=True, exist_ok=True)
        write_private(self.cert_file, material.tls_crt)
        write_private(self.key_file, material.tls_key)
        return True

    def _targets(self) -> list[tuple[str, str, Any, Any]]:
        r = self.registration
        mutating = [
            (name, r.read_mutating_webhook_configuration, r.patch_mutating_webhook_configuration)
            for name in self.config.mutating
        ]
        validating = [
            (name, r.read_validating_webhook_configuration, r.patch_validating_webhook_configuration)
            for name in self.config.validating
        ]
        return [("MutatingWebhookConfiguration", *m) for m in mutating] + [
            ("ValidatingWebhookConfiguration", *v) for v in validating
        ]

    async def _publish(self, material: Material, serial: int) -> bytes:
        """Put the bundle in every webhook configuration unless one holds a newer bundle; returns
        the bundle they all hold afterwards (b"" when they differ or one holds none)."""
        if not self._targets():
            return material.ca_bundle  # no configuration to wait for (a caBundle set by hand)
        wanted = base64.b64encode(material.ca_bundle).decode()
        held: set[str] = set()
        for kind, name, read, patch in self._targets():
            try:
                current = await read(name)
            except ApiException as exc:
                raise KeeperError(f"{kind} {name}: cannot read it ({exc.status} {exc.reason})") from None
            webhooks = current.webhooks or []
            bundles = {(w.client_config.ca_bundle if w.client_config else None) or "" for w in webhooks}
            if bundles == {wanted} or _serial(current.metadata) > serial:
                held |= bundles
                continue
            operations: list[dict[str, Any]] = [
                {"op": "test", "path": "/metadata/resourceVersion", "value": current.metadata.resource_version},
            ]
            if current.metadata.annotations:
                operations.append(
                    {"op": "add", "path": "/metadata/annotations/" + SERIAL.replace("/", "~1"), "value": str(serial)}
                )
            else:
                operations.append({"op": "add", "path": "/metadata/annotations", "value": {SERIAL: str(serial)}})
            for index, webhook in enumerate(webhooks):
                operations.append({"op": "test", "path": f"/webhooks/{index}/name", "value": webhook.name})
                operations.append({"op": "add", "path": f"/webhooks/{index}/clientConfig/caBundle", "value": wanted})
            try:
                await patch(name, operations)
            except ApiException as exc:
                if exc.status in (409, 422):  # changed since it was read: the next round sees it
                    return b""
                raise KeeperError(f"{kind} {name}: cannot patch caBundle ({exc.status} {exc.reason})") from None
            log.info("published the CA bundle", kind=kind, name=name, serial=serial)
            held.add(wanted)
        return base64.b64decode(held.pop()) if len(held) == 1 else b""

    async def sync(self, steps: int = 4) -> Material:
        """One round: read (or create) the Secret, publish the bundle, write the pair, take the
        next step; again after a step, up to ``steps`` times. Returns the material served.

        Raises:
            KeeperError: the API server refused a read or a write (the message says which).
        """
        try:
            for _ in range(steps):
                material, serial, version = await self._current()
                published = await self._publish(material, serial)
                # Only a pair the published bundle trusts is served.
                if material.tls_crt and trusted_by(published, _issuer(material)) and self._write_files(material):
                    log.info("serving pair written", cert=str(self.cert_file))
                if time.time_ns() - serial < self.config.settle * 1e9:
                    published = b""  # too fresh to serve a pair of its CA yet
                step = next_step(material, self.config.settings, published)
                if step is None:
                    return material
                changed, why = step
                new_serial = time.time_ns() if changed.ca_bundle != material.ca_bundle else serial
                if await self._update(changed, new_serial, version):
                    log.info("certificate Secret updated", reason=why)
            return material
        except _TRANSIENT as exc:
            raise KeeperError(f"the API server did not answer: {exc or type(exc).__name__}") from None

    async def start(self, timeout: float = 300.0) -> None:
        """Connect (``kubeconfig``, or the in-cluster service account), then the first round,
        retried (1 s, doubling to 10 s) until it succeeds; the serving pair is on disk afterwards.

        Raises:
            KeeperError: no usable kubeconfig, or no round succeeded within ``timeout`` seconds
                (the last error).
        """
        if self.api is None:
            try:
                self.api = await connect(self.kubeconfig)
            except (ClusterError, ConfigException) as exc:
                raise KeeperError(f"cannot reach the API server: {exc}") from None
        deadline = time.monotonic() + timeout
        delay = 1.0
        while True:
            try:
                await self.sync()
                if self.cert_file.is_file() and self.key_file.is_file():
                    return
                raise KeeperError("no serving pair the published caBundle trusts yet")
            except KeeperError as exc:
                if time.monotonic() + delay > deadline:
                    raise
                log.warning("certificates not ready yet; retrying", error=str(exc), retry_s=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    async def close(self) -> None:
        """Close the API client (2 s at most)."""
        if self.api is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.api.close(), 2.0)
            self.api = None

    async def run(self) -> None:
        """Rounds every ``interval`` seconds until cancelled; a failed round is logged and retried."""
        while True:
            await asyncio.sleep(self.config.interval)
            try:
                await self.sync()
            except KeeperError as exc:
                log.warning("certificate round failed; retrying next interval", error=str(exc))
