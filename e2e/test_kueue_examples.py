"""``kgov mutate`` on Kueue's own example manifests gives the podsets the real Kueue computes.

Every file of Kueue's ``site/static/examples`` at the release the cluster runs (fetched by the
e2e build, :mod:`e2e.kueue_examples`) that holds a workload kind of ours is read as a user of
the research team would write it: its ``kueue.x-k8s.io/queue-name`` label naming research's
LocalQueue, its ``priority-class`` label left out (the governor gives the team's); every other
label and annotation, TAS and pod-group ones included, kept. Then:

- offline: ``kgov mutate --explain`` of the file in ``hyperpod-ns-research`` prints, for each
  document, each podset as Kueue sees it (name, pods, one pod's requests);
- the oracle: each document is created in ``hyperpod-ns-research`` through the live governor
  (whose LocalQueue Kueue admits from), and Kueue's Workload for it is read: its
  ``spec.podSets`` names and counts must equal the offline podsets, and once admitted, each
  ``status.admission.podSetAssignments[]`` count and ``resourceUsage`` ÷ count must equal the
  offline count and per-pod requests.

A document whose kind this cluster does not serve, that it refuses, whose Workload needs a
controller it lacks, or that Kueue does not admit here within a minute, is printed with what was
not compared; a file where nothing was compared is skipped with the reasons (``-rs``); a mismatch
fails. Not modelled: the name of a
Kueue pod group's podset (the hash of its role's pod spec; ours is ``main``): for a group of one
role, its count and requests are compared under our name.
"""

from __future__ import annotations

import copy
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from kubernetes_asyncio.dynamic import DynamicClient

from e2e.build import KUEUE_VERSION
from e2e.kueue_examples import examples_dir
from e2e.support import (
    BUNDLED_PLATFORM,
    Cleanup,
    Refused,
    WaitTimeout,
    create_with_warnings,
    is_true,
    load_yaml_documents,
    wait_for,
    workload_for,
)
from e2e.test_auto_placement import _delete_pods as delete_pods
from e2e.test_kueue_view import RESEARCH, first_job_of, kueue_usage, pods_of, served, unique
from webhook.cli import main
from webhook.core.kueue.kinds import find_kind
from webhook.core.plan.rules.capacity import requests_text

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("bundled_governor")]

EXAMPLES = examples_dir(KUEUE_VERSION)
DOCUMENT = re.compile(r"^# document (?P<index>\d+): ")
EXPLAINED = re.compile(r"^#   podset '(?P<name>[^']*)' \(Kueue's view\): (?P<count>\d+) pods? of (?P<requests>.*)$")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
#: The research team's LocalQueue of the bundled platform (kueue-config/generated/localqueues.yaml).
RESEARCH_QUEUE = "hyperpod-ns-research-localqueue"
POD_GROUP = "kueue.x-k8s.io/pod-group-name"
#: Not modelled: Kueue names a pod group's podsets by the hash of each role's pod spec
#: (``kueue.x-k8s.io/role-hash``, ``utilpod.GenerateRoleHash``); our view names the podset ``main``.
ROLE_HASH = "Kueue names a pod group's podset by its role hash, which our view does not compute"
#: Podset → (pods, one pod's requests as :func:`requests_text` prints them).
Sizes = dict[str, tuple[int, str]]


def in_research(document: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``document`` as a user of the research team writes it: a queue label of its own
    names research's LocalQueue instead (Kueue's webhook then defaults the object, as it does the
    example's), a priority label of its own is left out (at the top and, for a CronJob, on its
    job template)."""
    out = copy.deepcopy(document)
    for metadata in (out.get("metadata"), ((out.get("spec") or {}).get("jobTemplate") or {}).get("metadata")):
        labels = (metadata or {}).get("labels")
        if isinstance(labels, dict):
            if QUEUE_LABEL in labels:
                labels[QUEUE_LABEL] = RESEARCH_QUEUE
            labels.pop(PRIORITY_LABEL, None)
    return out


def workload_documents(path: Path) -> list[int]:
    """The indexes (in the file's documents that are maps) of the documents of a workload kind."""
    return [
        index
        for index, document in enumerate(load_yaml_documents(path))
        if find_kind(str(document.get("apiVersion", "")), str(document.get("kind", ""))) is not None
    ]


def _files() -> list[Any]:
    if not (EXAMPLES / "COMMIT").is_file():
        reason = f"Kueue {KUEUE_VERSION}'s examples are not fetched ({EXAMPLES}): run `python -m e2e.build`"
        return [pytest.param("", marks=pytest.mark.skip(reason=reason))]
    return [
        pytest.param(str(path.relative_to(EXAMPLES)), id=str(path.relative_to(EXAMPLES)))
        for path in sorted(EXAMPLES.glob("**/*.yaml"))
        if workload_documents(path)
    ]


def offline(documents: list[dict[str, Any]], directory: Path) -> dict[int, Sizes]:
    """``kgov mutate --explain`` of the documents as one file: document index → its podsets."""
    manifest = directory / "manifest.yaml"
    manifest.write_text(yaml.safe_dump_all(documents))
    result = CliRunner().invoke(
        main, ["mutate", "--platform", str(BUNDLED_PLATFORM), "-n", RESEARCH, "-f", str(manifest), "--explain"]
    )
    assert result.exit_code in (0, 1), result.stderr
    found: dict[int, Sizes] = {}
    current = -1
    for line in result.stderr.splitlines():
        if match := DOCUMENT.match(line):
            current = int(match["index"]) - 1
            found[current] = {}
        elif match := EXPLAINED.match(line):
            found[current][match["name"]] = (int(match["count"]), match["requests"])
    return found


def admitted_sizes(workload: dict[str, Any]) -> Sizes:
    """Kueue's admitted Workload: podset → (pods, one pod's requests from its resource usage)."""
    out = {}
    for name, (count, usage) in kueue_usage(workload).items():
        per_pod: dict[str, Decimal] = {resource: amount / count for resource, amount in usage.items()} if count else {}
        out[name] = (count, requests_text(per_pod))
    return out


def group_member(document: dict[str, Any]) -> bool:
    """Whether ``document`` is a Pod of a Kueue pod group (its name as a label or annotation)."""
    metadata = document.get("metadata") or {}
    grouped = any(POD_GROUP in (metadata.get(key) or {}) for key in ("labels", "annotations"))
    return document.get("kind") == "Pod" and grouped


def role_names(document: dict[str, Any], ours: Sizes, kueue: dict[str, int]) -> dict[str, str]:
    """For a member of a Kueue pod group whose group is one role: Kueue's podset name (the role's
    hash) → ours; else nothing to rename."""
    if not group_member(document) or len(ours) != 1 or len(kueue) != 1:
        return {}
    return {next(iter(kueue)): next(iter(ours))}


async def owners(dynamic: DynamicClient, stored: dict[str, Any]) -> list[str]:
    """The uids Kueue's Workloads of ``stored`` are owned by: its own, a Deployment's pods'
    (a Workload per pod), a CronJob's first Job's."""
    if stored["kind"] == "Deployment":
        return await pods_of(dynamic, stored, int(stored["spec"].get("replicas", 1)))
    if stored["kind"] == "CronJob":
        return [await first_job_of(dynamic, stored)]
    return [stored["metadata"]["uid"]]


async def admitted(dynamic: DynamicClient, uid: str) -> dict[str, Any] | None:
    workload = await workload_for(dynamic, RESEARCH, uid)
    return workload if workload is not None and is_true(workload, "Admitted") else None


class Comparison:
    """What one example file's documents compared, and what they could not."""

    def __init__(self) -> None:
        self.podsets = 0
        self.admitted = 0
        self.not_compared: list[str] = []
        self.group_pods: list[dict[str, Any]] = []

    async def create(
        self, dynamic: DynamicClient, cleanup: Cleanup, body: dict[str, Any], label: str
    ) -> dict[str, Any] | None:
        """Create ``body`` in research; the stored object, or None (not served, refused)."""
        if not await served(dynamic, body["apiVersion"], body["kind"]):
            self.not_compared.append(f"{label}: {body['apiVersion']} {body['kind']} is not served here")
            return None
        body["metadata"]["namespace"] = RESEARCH
        named = "name" in body["metadata"]
        if named and not group_member(body):
            cleanup.add(body)
        try:
            stored = (await create_with_warnings(dynamic, body)).obj
        except Refused as refused:
            self.not_compared.append(f"{label}: {refused}")
            return None
        if group_member(body):  # KWOK never stops its containers: its finalizer is dropped at the end
            self.group_pods.append(stored)
        elif not named:
            cleanup.add(stored)
        return stored

    async def document(
        self, dynamic: DynamicClient, body: dict[str, Any], stored: dict[str, Any], ours: Sizes, label: str
    ) -> None:
        """Compare Kueue's Workloads of ``stored`` (``body`` as created) with ``ours``."""
        try:
            uids = await owners(dynamic, stored)
        except WaitTimeout as failed:
            self.not_compared.append(f"{label}: {failed}")
            return
        for uid in uids:
            await self.workload(dynamic, body, uid, ours, label)

    async def workload(self, dynamic: DynamicClient, body: dict[str, Any], uid: str, ours: Sizes, label: str) -> None:
        try:
            workload = await wait_for(lambda: workload_for(dynamic, RESEARCH, uid), f"{label}'s Workload", 30)
        except WaitTimeout:
            self.not_compared.append(f"{label}: no Workload within 30s (a controller this cluster lacks)")
            return
        kueue = {p["name"]: int(p["count"]) for p in workload["spec"]["podSets"]}
        print(f"\n{label}: kgov mutate {ours}\n{label}: Kueue's podSets {kueue}")
        renamed = role_names(body, ours, kueue)
        if renamed:
            kueue = {renamed.get(name, name): count for name, count in kueue.items()}
            self.not_compared.append(f"{label}: podset names ({ROLE_HASH})")
        assert {name: count for name, (count, _) in ours.items()} == kueue, label
        self.podsets += len(kueue)
        try:
            done = await wait_for(lambda: admitted(dynamic, uid), f"{label}'s Workload admitted", 60)
        except WaitTimeout:
            self.not_compared.append(f"{label}: Workload not admitted within 60s (requests not compared)")
            return
        sizes = {renamed.get(name, name): size for name, size in admitted_sizes(done).items()}
        print(f"{label}: Kueue's admission {sizes}")
        assert ours == sizes, label
        self.admitted += len(kueue)


@pytest.mark.parametrize("name", _files())
async def test_kgov_mutate_gives_the_podsets_kueue_computes_for_its_example(
    dynamic: DynamicClient, cleanup: Cleanup, name: str, tmp_path: Path
) -> None:
    path = EXAMPLES / name
    documents = [in_research(d) for d in load_yaml_documents(path)]
    for index in workload_documents(path):  # a name of its own for each run (podset names may hold it)
        metadata = documents[index].setdefault("metadata", {})
        if "name" in metadata:
            metadata["name"] = unique(str(metadata["name"])[:40])
    ours = offline(documents, tmp_path)
    comparison = Comparison()
    try:  # all of a file's documents first: a pod group's Workload needs all its pods
        created = {
            i: await comparison.create(dynamic, cleanup, documents[i], f"{name}#{i}") for i in workload_documents(path)
        }
        for index, stored in created.items():
            if stored is not None:
                await comparison.document(dynamic, documents[index], stored, ours[index], f"{name}#{index}")
    finally:
        if comparison.group_pods:
            await delete_pods(dynamic, comparison.group_pods)
    counted = f"{comparison.podsets} podsets, {comparison.admitted} admitted"
    print(f"\n{name}: {counted}; not compared: {comparison.not_compared}")
    if not comparison.podsets:
        pytest.skip("; ".join(comparison.not_compared))
