"""Record what a real kube-apiserver answers to the node, namespace and policy ConfigMap caches'
list and watch.

Run from the repository root: ``.venv/bin/python tests/data/watch/record.py [nodes] [namespaces]
[configmap]`` (all three when none is named; needs the e2e binaries: ``make e2e-build``). It starts
etcd and kube-apiserver alone (``e2e/devcluster/``'s commands, in a temporary directory), creates
the eight nodes recorded in ``tests/data/why/bundled.json``, lists them, and watches from the list's
``resourceVersion`` (with bookmarks) while it cordons one node, taints another ``NoExecute``,
deletes one and adds one; for namespaces, while one is created, labelled and deleted; for the policy
ConfigMap (``kgov-policy`` of ``kueue-config/generated/policy-configmap.yaml``, listed and watched
with ``fieldSelector=metadata.name=kgov-policy`` next to another ConfigMap that also changes), while
its ``policy.json`` gets a new default priority, then JSON cut short, then a PolicySet with an
unknown field, then loses the key, then the ConfigMap is deleted and created again; and the answer
to an ``events.k8s.io/v1`` Event about it, as ``webhook.kube.policy_watch.policy_event`` builds it
(in ``configmap.json``: ``event`` holds the request and ``created`` the answer). Then it restarts
the API server without its watch cache and with etcd compacted every 5 s, and watches again from
each list's version, now older than the API server keeps, for the ``410 Expired`` answer. Each
answer is written as the API server sent it: ``nodes.json`` and ``namespaces.json`` next to this
file hold ``{"list": <list body>, "events": [<one object per watch line>], "expired": [<lines>]}``
(``managedFields`` removed).
"""

from __future__ import annotations

import asyncio
import copy
import json
import ssl
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from e2e import build, devcluster  # noqa: E402

HERE = Path(__file__).resolve().parent
RECORDED_NODES = REPO / "tests" / "data" / "why" / "bundled.json"
POLICY_CONFIGMAP = REPO / "kueue-config" / "generated" / "policy-configmap.yaml"
CONFIGMAPS = "/api/v1/namespaces/kueue-governor-system/configmaps"
WATCH_SECONDS = 6
COMPACTED_AFTER = 12


def _clean(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items() if k != "managedFields"}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    return obj


def _node(recorded: dict[str, Any]) -> dict[str, Any]:
    node = copy.deepcopy(recorded)
    for key in ("resourceVersion", "uid", "creationTimestamp"):
        node["metadata"].pop(key, None)
    return node


class Api:
    def __init__(self, url: str, token: str, ca: Path) -> None:
        self.url = url
        self.session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {token}"},
            connector=aiohttp.TCPConnector(ssl=ssl.create_default_context(cafile=str(ca))),
        )

    async def call(self, method: str, path: str, body: Any = None, patch: bool = False) -> Any:
        headers = {"Content-Type": "application/merge-patch+json"} if patch else {}
        async with self.session.request(method, self.url + path, json=body, headers=headers) as resp:
            data = await resp.json()
            if resp.status >= 300:
                raise RuntimeError(f"{method} {path}: {resp.status} {data}")
            return data

    async def watch(self, path: str, version: str, selector: str = "") -> list[Any]:
        query = f"?watch=1&resourceVersion={version}&allowWatchBookmarks=true&timeoutSeconds={WATCH_SECONDS}"
        query += f"&fieldSelector={selector}" if selector else ""
        lines = []
        async with self.session.get(self.url + path + query) as resp:
            async for line in resp.content:
                if line.strip():
                    lines.append(_clean(json.loads(line)))
        return lines


async def record_nodes(api: Api) -> dict[str, Any]:
    nodes = json.loads(RECORDED_NODES.read_text())["nodes"]
    for node in nodes[:7]:
        await api.call("POST", "/api/v1/nodes", _node(node))
    listing = await api.call("GET", "/api/v1/nodes")
    watching = asyncio.create_task(api.watch("/api/v1/nodes", listing["metadata"]["resourceVersion"]))
    await asyncio.sleep(1)
    await api.call("PATCH", f"/api/v1/nodes/{nodes[0]['metadata']['name']}", {"spec": {"unschedulable": True}}, True)
    taint = {"key": "example.com/maintenance", "value": "yes", "effect": "NoExecute"}
    await api.call("PATCH", f"/api/v1/nodes/{nodes[2]['metadata']['name']}", {"spec": {"taints": [taint]}}, True)
    await api.call("DELETE", f"/api/v1/nodes/{nodes[6]['metadata']['name']}")
    await api.call("POST", "/api/v1/nodes", _node(nodes[7]))
    return {"list": _clean(listing), "events": await watching}


async def record_namespaces(api: Api) -> dict[str, Any]:
    listing = await api.call("GET", "/api/v1/namespaces")
    watching = asyncio.create_task(api.watch("/api/v1/namespaces", listing["metadata"]["resourceVersion"]))
    await asyncio.sleep(1)
    name = "ml-dev"
    await api.call("POST", "/api/v1/namespaces", {"metadata": {"name": name, "labels": {"team": "ml"}}})
    await api.call("PATCH", f"/api/v1/namespaces/{name}", {"metadata": {"labels": {"team": "infra"}}}, True)
    await api.call("DELETE", f"/api/v1/namespaces/{name}")
    return {"list": _clean(listing), "events": await watching}


async def record_configmap(api: Api) -> dict[str, Any]:
    from webhook.kube.policy_watch import policy_event

    generated = yaml.safe_load(POLICY_CONFIGMAP.read_text())
    policy = generated["data"]["policy.json"]
    changed = policy.replace('"default": "training-priority"', '"default": "experimentation-priority"', 1)
    assert changed != policy
    await api.call("POST", "/api/v1/namespaces", {"metadata": {"name": "kueue-governor-system"}})
    await api.call("POST", CONFIGMAPS, {"metadata": {"name": "other"}, "data": {"a": "1"}})
    await api.call("POST", CONFIGMAPS, generated)
    selector = "metadata.name=kgov-policy"
    listing = await api.call("GET", f"{CONFIGMAPS}?fieldSelector={selector}")
    version = listing["metadata"]["resourceVersion"]
    watching = asyncio.create_task(api.watch(CONFIGMAPS, version, selector))
    await asyncio.sleep(1)
    path = f"{CONFIGMAPS}/kgov-policy"
    for data in (
        {"policy.json": changed},
        {"policy.json": changed[:200]},
        {"policy.json": changed.replace('"teams"', '"unknownField": 1, "teams"', 1)},
    ):
        await api.call("PATCH", path, {"data": data}, True)
        await api.call("PATCH", f"{CONFIGMAPS}/other", {"data": {"a": data["policy.json"][:8]}}, True)
    await api.call("PATCH", path, {"data": {"policy.json": None, "other.json": "{}"}}, True)
    await api.call("DELETE", path)
    await api.call("POST", CONFIGMAPS, generated)
    event = policy_event(
        "kueue-governor-system",
        "kgov-policy",
        listing["items"][0],  # as the watch saw it last, its uid included
        "PolicyConfigMapDeleted",
        "ConfigMap kueue-governor-system/kgov-policy was deleted; the last good policy stays in force",
        "kgov-governor-5d8f7c9b6-x2x7q",
        now=1767225600.123456,
    )
    created = await api.call("POST", "/apis/events.k8s.io/v1/namespaces/kueue-governor-system/events", event)
    return {"list": _clean(listing), "events": await watching, "event": event, "created": _clean(created)}


RECORDINGS = {"nodes": record_nodes, "namespaces": record_namespaces, "configmap": record_configmap}


async def record(url: str, token: str, ca: Path, names: list[str]) -> dict[str, dict[str, Any]]:
    api = Api(url, token, ca)
    try:
        return {name: await RECORDINGS[name](api) for name in names}
    finally:
        await api.session.close()


async def record_expired(url: str, token: str, ca: Path, recorded: dict[str, dict[str, Any]]) -> None:
    api = Api(url, token, ca)
    try:
        for name, data in recorded.items():
            path = CONFIGMAPS if name == "configmap" else f"/api/v1/{name}"
            selector = "metadata.name=kgov-policy" if name == "configmap" else ""
            data["expired"] = await api.watch(path, data["list"]["metadata"]["resourceVersion"], selector)
            (HERE / f"{name}.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
            listed, events = len(data["list"]["items"]), len(data["events"])
            print(f"{name}: {listed} listed, {events} events, expired: {data['expired']}")
    finally:
        await api.session.close()


def start_apiserver(paths: Any, binary: Path, etcd_url: str, port: int, token: str, *extra: str) -> None:
    devcluster.start_process(
        paths, "kube-apiserver", [*devcluster.apiserver_command(binary, paths, etcd_url, port), *extra]
    )
    context = devcluster.tls_context(paths.ca_crt)
    url = f"https://127.0.0.1:{port}"
    ready = lambda: devcluster.http_ok(f"{url}/readyz", context, token)  # noqa: E731
    devcluster.wait_until("kube-apiserver /readyz", ready, 180, paths, "kube-apiserver")


def main(names: list[str]) -> None:
    unknown = set(names) - set(RECORDINGS)
    if unknown:
        sys.exit(f"unknown recordings {sorted(unknown)}; known: {sorted(RECORDINGS)}")
    binaries = build.ensure_binaries()
    with tempfile.TemporaryDirectory(prefix="kgov-watch-") as directory:
        paths = devcluster.Paths(Path(directory))
        tokens = devcluster.write_pki(paths)
        etcd_client, etcd_peer, port = devcluster.free_ports(3)
        etcd_url = f"http://127.0.0.1:{etcd_client}"
        url = f"https://127.0.0.1:{port}"
        paths.etcd_data.mkdir(parents=True)
        paths.etcd_data.chmod(0o700)
        try:
            devcluster.start_process(
                paths, "etcd", devcluster.etcd_command(binaries["etcd"], paths, etcd_client, etcd_peer)
            )
            devcluster.wait_until("etcd /health", lambda: devcluster.http_ok(f"{etcd_url}/health"), 60, paths, "etcd")
            start_apiserver(paths, binaries["kube-apiserver"], etcd_url, port, tokens["admin"])
            recorded = asyncio.run(record(url, tokens["admin"], paths.ca_crt, names))
            # The 410: the watch cache keeps minutes of history, so a young cluster replays any
            # version. Restarted without it and with etcd compacted every 5 s, the API server
            # answers a watch from the lists' (now compacted) versions as a long-running one does.
            devcluster.stop_process(paths, "kube-apiserver")
            start_apiserver(
                paths,
                binaries["kube-apiserver"],
                etcd_url,
                port,
                tokens["admin"],
                "--watch-cache=false",
                "--etcd-compaction-interval=5s",
            )
            time.sleep(COMPACTED_AFTER)
            asyncio.run(record_expired(url, tokens["admin"], paths.ca_crt, recorded))
        finally:
            for name in ("kube-apiserver", "etcd"):
                devcluster.stop_process(paths, name)


if __name__ == "__main__":
    main(sys.argv[1:] or list(RECORDINGS))
