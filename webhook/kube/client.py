"""The one place a kubeconfig is found, checked and turned into an API client (kubernetes-asyncio).

Every command that reads a cluster (``kgov why``, ``status``, ``diff``, ``topology``, ``certs``)
and ``kgov serve --watch-cluster`` go through :func:`open_client`; GETs of plain JSON go through
:func:`get_json`. Whatever is wrong — a missing file, YAML that does not parse, an empty file, a
YAML list, a kubeconfig without a usable context, a server that does not answer as a Kubernetes
API server — comes out as one :class:`ClusterError` whose message says which file or server and
what is wrong with it.

Which kubeconfig (:func:`kubeconfig_files`), as kubectl: ``--kubeconfig``, else every file of
``$KUBECONFIG`` that exists (merged, the first file's entries winning), else ``~/.kube/config``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from webhook.core.platform.fields import dns1123_label_error, dns1123_subdomain_error

__all__ = [
    "ClusterError",
    "apply_json",
    "check_path",
    "context_namespace",
    "get_json",
    "items_of",
    "kubeconfig_files",
    "open_client",
]


class ClusterError(RuntimeError):
    """The cluster could not be used: kubeconfig, connection, authorisation, a server that is not
    Kubernetes, or an absent object (the message says which)."""


def _home_config() -> Path:
    return Path.home() / ".kube" / "config"


def _readable_entry(path: Path) -> bool:
    """A path that exists and is not a directory: a file, or a device such as /dev/null (read
    as it is: empty, hence not a kubeconfig)."""
    return path.exists() and not path.is_dir()


def kubeconfig_files(option: str | Path | None, *, in_cluster: bool = False) -> list[str] | None:
    """The kubeconfig files to merge: ``[--kubeconfig]``, else the files of ``$KUBECONFIG`` that
    exist (kubectl skips missing ones), else ``[~/.kube/config]``. None when ``in_cluster`` and
    none of these is there (use the pod's service account).

    Raises:
        ClusterError: ``--kubeconfig`` is not a file; ``$KUBECONFIG`` is set but names no file
            that exists; nothing found and not ``in_cluster``.
    """
    if option is not None and str(option) != "":
        path = Path(option)
        if not _readable_entry(path):
            what = "is a directory" if path.is_dir() else "no such file"
            raise ClusterError(f"--kubeconfig {option}: {what}")
        return [str(path)]
    listed = [entry for entry in os.environ.get("KUBECONFIG", "").split(os.pathsep) if entry]
    if listed:
        found = [str(Path(entry).expanduser()) for entry in listed if _readable_entry(Path(entry).expanduser())]
        if found:
            return found
        if in_cluster:
            return None
        raise ClusterError(f"$KUBECONFIG={os.environ['KUBECONFIG']}: no such file")
    if _home_config().is_file():
        return [str(_home_config())]
    if in_cluster:
        return None
    raise ClusterError(f"no kubeconfig: give --kubeconfig FILE, set $KUBECONFIG, or create {_home_config()}")


def _check_file(path: str) -> dict[str, Any]:
    """The file's mapping; refuse one kubernetes-asyncio would trip over with a bare Python error."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ClusterError(f"cannot load kubeconfig {path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ClusterError(
            f"cannot load kubeconfig {path}: not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ClusterError(f"cannot load kubeconfig {path}: not YAML ({problem}{where})") from None
    if data is None:
        raise ClusterError(f"cannot load kubeconfig {path}: empty (a kubeconfig has clusters, users, contexts)")
    if not isinstance(data, dict):
        raise ClusterError(
            f"cannot load kubeconfig {path}: a YAML {type(data).__name__}, not a kubeconfig "
            "(a mapping with clusters, users, contexts)"
        )
    for key in ("clusters", "contexts", "users"):
        if data.get(key) is not None and not isinstance(data.get(key), list):
            raise ClusterError(f"cannot load kubeconfig {path}: {key} is not a list")
    return data


def context_namespace(kubeconfig: str | Path | None, context: str | None = None) -> str:
    """The namespace of the kubeconfig's context (``context``, else the current-context), as
    kubectl uses it when no ``-n`` is given: ``default`` when the context sets none. Files as
    :func:`kubeconfig_files` picks them; the first file that sets ``current-context`` and the
    first that defines a context name win, as kubectl merges them.

    Raises:
        ClusterError: see :func:`kubeconfig_files` and the file checks; a namespace that is not
            a DNS-1123 label.
    """
    files = kubeconfig_files(kubeconfig)
    assert files is not None
    documents = [_check_file(path) for path in files]
    if context is None:
        context = next((str(d["current-context"]) for d in documents if d.get("current-context")), None)
    if context is None:
        return "default"
    for document in documents:
        for entry in document.get("contexts") or []:
            if isinstance(entry, dict) and entry.get("name") == context:
                namespace = str((entry.get("context") or {}).get("namespace") or "default")
                problem = dns1123_label_error(namespace)
                if problem:
                    raise ClusterError(
                        f"cannot load kubeconfig {' + '.join(files)}: context {context!r}: namespace {problem}"
                    )
                return namespace
    return "default"  # a context not defined: reading the cluster says so


async def _configuration(files: list[str], context: str | None) -> Any:
    from kubernetes_asyncio import client, config

    documents = [_check_file(path) for path in files]
    if context is None:
        # kubectl: the first file that sets current-context wins (the library would take the last).
        context = next((str(d["current-context"]) for d in documents if d.get("current-context")), None)
    configuration = client.Configuration()
    named = " + ".join(files)
    try:
        await config.load_kube_config(
            config_file=os.pathsep.join(files),
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    except config.ConfigException as exc:
        raise ClusterError(f"cannot load kubeconfig {named}: {exc}") from None
    except (OSError, TypeError, ValueError, KeyError, AttributeError, yaml.YAMLError) as exc:
        raise ClusterError(
            f"cannot load kubeconfig {named}: not a usable kubeconfig ({type(exc).__name__}: {exc})"
        ) from None
    if not str(configuration.host or "").startswith(("https://", "http://")):
        raise ClusterError(f"cannot load kubeconfig {named}: server {configuration.host!r} is not an http(s) URL")
    return configuration


async def open_client(
    kubeconfig: str | Path | None,
    *,
    context: str | None = None,
    in_cluster: bool = False,
    search: bool = True,
    check_server: bool = True,
) -> Any:
    """A ``kubernetes_asyncio.client.ApiClient`` (use it as an async context manager) for the
    kubeconfig :func:`kubeconfig_files` picks, or the in-cluster service account when
    ``in_cluster`` and no kubeconfig is found (without ``search``, only ``kubeconfig`` is looked
    at: none means the service account, as ``kgov serve`` has it). With ``check_server``, ``GET /version`` first: the
    server must answer as a Kubernetes API server (JSON with ``gitVersion``, or a Kubernetes
    ``Status`` when refused).

    Raises:
        ClusterError: see :func:`kubeconfig_files`; a kubeconfig that cannot be read or used; an
            unreachable server or one that is not a Kubernetes API server.
    """
    from kubernetes_asyncio import client, config

    if search:
        files = kubeconfig_files(kubeconfig, in_cluster=in_cluster)
    else:
        files = kubeconfig_files(kubeconfig) if kubeconfig else None
    if files is None:
        configuration = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except config.ConfigException as exc:
            raise ClusterError(f"no kubeconfig and not in a cluster: {exc}") from None
    else:
        configuration = await _configuration(files, context)
    api = client.ApiClient(configuration)
    if check_server:
        try:
            await _check_server(api, str(configuration.host))
        except BaseException:
            await api.close()
            raise
    return api


def _content_type(response: Any) -> str:
    headers = getattr(response, "headers", None) or {}
    return str(headers.get("Content-Type", "") or "").split(";")[0] or "no content type"


def check_path(path: str) -> None:
    """Refuse an API path with a part that is not a Kubernetes name (a DNS-1123 subdomain: group,
    version, resource and object names all are): ``..``, ``?``, ``#``, ``%``, an empty part. A
    user's string that slipped into a path would otherwise address another object.

    Raises:
        ClusterError: which part, of which path.
    """
    parts = path.split("/")
    for part in parts[1:] if path.startswith("/") else parts:
        if dns1123_subdomain_error(part) is not None:
            raise ClusterError(f"refusing to GET {path!r}: {part!r} is not a Kubernetes name (DNS-1123 subdomain)")


async def _raw_get(api: Any, path: str, query: list[tuple[str, str]] | None = None) -> tuple[int, str, Any, str]:
    """(status, reason, JSON body or None when not JSON, content type) of one GET."""
    check_path(path)
    import aiohttp
    from kubernetes_asyncio.client.exceptions import ApiException

    try:
        response = await api.call_api(
            path,
            "GET",
            query_params=query or [],
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
        )
        status, reason, kind = response.status, response.reason, _content_type(response)
        try:
            data = await response.json(content_type=None)
        except ValueError:
            data = None
    except ApiException as exc:
        status, reason, kind = exc.status, exc.reason, "error"
        try:
            data = json.loads(exc.body) if exc.body else None
        except ValueError:
            data = None
    except (TimeoutError, OSError, aiohttp.ClientError) as exc:
        raise ClusterError(f"GET {path}: cannot reach the API server: {exc or type(exc).__name__}") from None
    return int(status), str(reason), data, kind


async def _check_server(api: Any, host: str) -> None:
    status, reason, data, kind = await _raw_get(api, "/version")
    if isinstance(data, dict) and ("gitVersion" in data or data.get("kind") == "Status"):
        return
    raise ClusterError(
        f"{host} does not answer as a Kubernetes API server (GET /version: HTTP {status} {reason}, {kind}); "
        "check the kubeconfig's server"
    )


async def get_json(api: Any, path: str, query: list[tuple[str, str]] | None = None) -> dict[str, Any] | None:
    """GET ``path`` as a JSON object; None on 404.

    Raises:
        ClusterError: unreachable server, any other status than 2xx and 404 (with the server's
            message), or a 2xx body that is not a JSON object (not a Kubernetes API server).
    """
    status, reason, data, kind = await _raw_get(api, path, query)
    if status == 404:
        return None
    if not 200 <= status <= 299:
        message = data.get("message") if isinstance(data, dict) else None
        raise ClusterError(f"GET {path}: HTTP {status} {reason}" + (f": {message}" if message else ""))
    if not isinstance(data, dict):
        raise ClusterError(f"GET {path}: the answer is not a JSON object ({kind}): not a Kubernetes API server?")
    return data


def items_of(listing: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The ``items`` of a list answer that are objects (none when absent)."""
    items = (listing or {}).get("items")
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


async def apply_json(api: Any, path: str, body: Mapping[str, Any], field_manager: str) -> dict[str, Any]:
    """Server-side apply ``body`` at ``path`` (the object's own path): ``PATCH`` with
    ``application/apply-patch+yaml`` (JSON is YAML), ``fieldManager=field_manager`` and ``force=true``,
    so the fields this manager applied last are taken back from any other manager (as
    ``kubectl apply --server-side --force-conflicts``). Returns the object as the server stored it.

    Raises:
        ClusterError: a path part that is not a Kubernetes name, an unreachable server, or any
            status but 2xx (with the server's message: a refused field, RBAC, an absent namespace).
    """
    check_path(path)
    import aiohttp
    from kubernetes_asyncio.client.exceptions import ApiException

    try:
        response = await api.call_api(
            path,
            "PATCH",
            query_params=[("fieldManager", field_manager), ("force", "true")],
            header_params={"Accept": "application/json", "Content-Type": "application/apply-patch+yaml"},
            body=dict(body),
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
        )
        status, reason = int(response.status), str(response.reason)
        try:
            data = await response.json(content_type=None)
        except ValueError:
            data = None
    except ApiException as exc:  # raised before the request is sent (a body it cannot encode)
        raise ClusterError(f"apply {path}: {exc.reason}") from None
    except (TimeoutError, OSError, aiohttp.ClientError) as exc:
        raise ClusterError(f"apply {path}: cannot reach the API server: {exc or type(exc).__name__}") from None
    if not 200 <= status <= 299:
        message = data.get("message") if isinstance(data, dict) else None
        raise ClusterError(f"apply {path}: HTTP {status} {reason}" + (f": {message}" if message else ""))
    if not isinstance(data, dict):
        raise ClusterError(f"apply {path}: the answer is not a JSON object: not a Kubernetes API server?")
    return data
