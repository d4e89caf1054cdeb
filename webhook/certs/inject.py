"""Publish the CA bundle in the ``caBundle`` of our webhook configurations (SPEC §7).

Each webhook of a Mutating- or ValidatingWebhookConfiguration whose ``clientConfig.caBundle``
differs from the bundle gets a JSON Patch that first ``test``\\ s the webhook's name at that index
(so a concurrent edit that reorders the webhooks fails instead of patching the wrong one) and then
sets the bundle. Nothing is written when the bundle is already there.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

__all__ = ["InjectError", "Injected", "inject_ca_bundle"]


class InjectError(RuntimeError):
    """A webhook configuration could not be read or patched (the message names it and why)."""


@dataclass(frozen=True)
class Injected:
    """One configuration: its kind and name, and the names of the webhooks whose caBundle changed."""

    kind: str
    name: str
    patched: list[str]


async def inject_ca_bundle(
    api: client.ApiClient, bundle: bytes, mutating: list[str], validating: list[str] | None = None
) -> list[Injected]:
    """Set ``caBundle`` (base64 of ``bundle``, PEM) in every webhook of the named configurations.

    Raises:
        InjectError: a configuration does not exist, or the API server refused the read or patch.
    """
    registration = client.AdmissionregistrationV1Api(api)
    wanted = base64.b64encode(bundle).decode()
    targets: list[tuple[str, str, Any, Any]] = [
        (
            "MutatingWebhookConfiguration",
            name,
            registration.read_mutating_webhook_configuration,
            registration.patch_mutating_webhook_configuration,
        )
        for name in mutating
    ]
    targets += [
        (
            "ValidatingWebhookConfiguration",
            name,
            registration.read_validating_webhook_configuration,
            registration.patch_validating_webhook_configuration,
        )
        for name in validating or []
    ]
    results = []
    for kind, name, read, patch in targets:
        try:
            current = await read(name)
        except ApiException as exc:
            raise InjectError(f"{kind} {name}: cannot read it ({exc.status} {exc.reason})") from None
        except (TimeoutError, OSError, aiohttp.ClientError) as exc:
            raise InjectError(f"{kind} {name}: cannot read it ({exc or type(exc).__name__})") from None
        operations: list[dict[str, Any]] = []
        patched = []
        for index, webhook in enumerate(current.webhooks or []):
            have = webhook.client_config.ca_bundle if webhook.client_config else None
            if have == wanted:
                continue
            patched.append(webhook.name)
            operations.append({"op": "test", "path": f"/webhooks/{index}/name", "value": webhook.name})
            operations.append({"op": "add", "path": f"/webhooks/{index}/clientConfig/caBundle", "value": wanted})
        if operations:
            try:
                await patch(name, operations)
            except ApiException as exc:
                raise InjectError(f"{kind} {name}: cannot patch caBundle ({exc.status} {exc.reason})") from None
            except (TimeoutError, OSError, aiohttp.ClientError) as exc:
                raise InjectError(f"{kind} {name}: cannot patch caBundle ({exc or type(exc).__name__})") from None
        results.append(Injected(kind, name, patched))
    return results
