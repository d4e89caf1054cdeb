"""Record what the real kube-apiserver sends and returns, as the unit tests' fixtures.

Two recordings, both against the local cluster of :mod:`e2e.devcluster` with the bundled platform
(``kueue-config/platform.yaml``) applied and ``kgov serve`` registered as ``kgov-governor``:

* **AdmissionReviews** (``tests/data/admission/*.json``). :class:`ReviewRecorder` is an HTTPS
  webhook on 127.0.0.1 registered as the MutatingWebhookConfiguration ``aa-kgov-review-recorder``
  (its name sorts before ``kgov-governor`` and Kueue's, so it is called first and sees exactly
  what the governor sees). It allows everything, patches nothing and keeps every body. Then, with
  kubectl in ``hyperpod-ns-research``: a server-side dry-run apply of a Job, the real apply, the
  Job's Pods created by the Job controller once Kueue admitted it, Kueue's UPDATE that starts it, a
  label change to another team's queue (refused by the governor) and a JobSet through a second
  webhook of the configuration that accepts AdmissionReview ``v1beta1`` only.
* **Live objects** (``tests/data/live/``): every object ``kgov generate --namespaces`` makes of
  the platform, read back by :func:`webhook.generate.live.fetch_live` (what ``kgov diff``
  compares), with the platform file they came from.

Volatile values are scrubbed the same way on every run (:func:`scrub`): UIDs become
``00000000-0000-4000-8000-<n>`` and ``resourceVersion`` values ``1000…``, numbered in order of
appearance, timestamps :data:`SCRUBBED_TIME`, and random name suffixes ``x`` characters. Two recordings
then give the same bytes. Command line (``make record-reviews``)::

    python -m e2e.record [--output-dir tests/data] [--state DIR]

It starts its own cluster in a temporary directory (or uses the one running in ``--state``), and
needs kubectl on PATH.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from aiohttp import web

from e2e import devcluster, support
from webhook.certs import generate_ca, issue_serving_certificate, write_private
from webhook.core.platform.platform import load_platform
from webhook.generate.live import fetch_live
from webhook.generate.manifests import GenerateOptions, build_manifests
from webhook.serve.tlsconfig import make_ssl_context

RECORDER_CONFIGURATION = "aa-kgov-review-recorder"
NAMESPACE = "hyperpod-ns-research"
JOB_NAME = "resnet-train"
JOBSET_PREFIX = "llama-pretrain-"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
OTHER_TEAMS_QUEUE = "hyperpod-ns-inference-localqueue"
MANIFESTS = Path(__file__).resolve().parent / "record_manifests"
JOB_MANIFEST = MANIFESTS / "resnet-train-job.yaml"
JOBSET_MANIFEST = MANIFESTS / "llama-pretrain-jobset.yaml"
DATA = support.REPO / "tests" / "data"
SCRUBBED_TIME = "2026-01-01T00:00:00Z"
LIVE_OBJECTS = "live/bundled-objects.json"
LIVE_PLATFORM = "live/platform.yaml"

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# The ServiceAccount admission plugin's projected token volume: kube-api-access-<5 random>.
_TOKEN_VOLUME = re.compile(r"(kube-api-access-)[a-z0-9]{5}\b")
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})")

Review = dict[str, Any]


class RecordingError(RuntimeError):
    """The API server did not send what a recording needs (the message says what it sent)."""


# --------------------------------------------------------------------------- the recording webhook


class ReviewRecorder:
    """An HTTPS admission webhook on 127.0.0.1 that allows every request, patches nothing and
    keeps every AdmissionReview body (``received``, in arrival order).

    Its serving certificate comes from a fresh CA (:mod:`webhook.certs`); :meth:`configuration`
    is the MutatingWebhookConfiguration that calls it. Use as ``async with ReviewRecorder():``.
    """

    def __init__(self) -> None:
        self.received: list[Review] = []
        self.port = devcluster.free_port()
        self._runner: web.AppRunner | None = None
        self._ca_pem = b""

    async def __aenter__(self) -> ReviewRecorder:
        ca_pem, ca_key = generate_ca("kgov-review-recorder-ca", days=1)
        cert, key = issue_serving_certificate(ca_pem, ca_key, ["localhost"], ["127.0.0.1"], days=1)
        with tempfile.TemporaryDirectory(prefix="kgov-recorder-") as directory:
            (Path(directory) / "tls.crt").write_bytes(cert)
            write_private(Path(directory) / "tls.key", key)
            context = make_ssl_context(Path(directory) / "tls.crt", Path(directory) / "tls.key")
        self._ca_pem = ca_pem
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_post("/v1", self._review)
        app.router.add_post("/v1beta1", self._review)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=context).start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _review(self, request: web.Request) -> web.Response:
        review = json.loads(await request.read())
        self.received.append(review)
        answer = {"uid": review["request"]["uid"], "allowed": True}
        return web.json_response({"apiVersion": review["apiVersion"], "kind": "AdmissionReview", "response": answer})

    def configuration(self, namespace: str) -> dict[str, Any]:
        """The ``aa-kgov-review-recorder`` MutatingWebhookConfiguration, for ``namespace`` only.

        Webhook ``v1.…``: Job CREATE and UPDATE and Pod CREATE, AdmissionReview v1. Webhook
        ``v1beta1.…``: JobSet CREATE, AdmissionReview v1beta1 only. ``failurePolicy: Fail``, so
        a request the recorder did not see fails instead of passing unrecorded.
        """
        bundle = base64.b64encode(self._ca_pem).decode()

        def webhook(version: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
            return {
                "name": f"{version}.review-recorder.kueue-governor.io",
                "clientConfig": {"url": f"https://127.0.0.1:{self.port}/{version}", "caBundle": bundle},
                "rules": rules,
                "admissionReviewVersions": [version],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "matchPolicy": "Equivalent",
                "reinvocationPolicy": "Never",
                "timeoutSeconds": 10,
            }

        def rule(group: str, version: str, resource: str, *operations: str) -> dict[str, Any]:
            return {
                "apiGroups": [group],
                "apiVersions": [version],
                "operations": list(operations),
                "resources": [resource],
                "scope": "Namespaced",
            }

        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": RECORDER_CONFIGURATION},
            "webhooks": [
                webhook("v1", [rule("batch", "v1", "jobs", "CREATE", "UPDATE"), rule("", "v1", "pods", "CREATE")]),
                webhook("v1beta1", [rule("jobset.x-k8s.io", "v1alpha2", "jobsets", "CREATE")]),
            ],
        }


# --------------------------------------------------------------------------- scrubbing


def _walk_versions(value: Any, found: dict[str, str]) -> None:
    """``resourceVersion`` values → ``1000``, ``1001``… in order of first appearance."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key == "resourceVersion" and isinstance(item, str) and item.isdigit():
                found.setdefault(item, str(1000 + len(found)))
            else:
                _walk_versions(item, found)
    elif isinstance(value, list):
        for item in value:
            _walk_versions(item, found)


def _manager(entry: Any) -> tuple[str, ...]:
    entry = entry if isinstance(entry, Mapping) else {}
    return tuple(str(entry.get(key, "")) for key in ("manager", "operation", "subresource", "apiVersion"))


def _replace_versions(value: Any, mapping: Mapping[str, str]) -> Any:
    if isinstance(value, Mapping):
        out = {
            key: mapping.get(item, item) if key == "resourceVersion" else _replace_versions(item, mapping)
            for key, item in value.items()
        }
        if isinstance(out.get("managedFields"), list):
            # Entries are kept in the order the managers first wrote, which races between
            # controllers; it means nothing, so it is made stable.
            out["managedFields"] = sorted(out["managedFields"], key=_manager)
        return out
    if isinstance(value, list):
        return [_replace_versions(item, mapping) for item in value]
    return value


def _generated_names(value: Any, found: dict[str, str]) -> None:
    """``name`` → scrubbed name for every metadata whose name was made from ``generateName``."""
    if isinstance(value, Mapping):
        prefix, name = value.get("generateName"), value.get("name")
        if isinstance(prefix, str) and isinstance(name, str) and name.startswith(prefix) and name != prefix:
            found.setdefault(name, prefix + "x" * (len(name) - len(prefix)))
        for item in value.values():
            _generated_names(item, found)
    elif isinstance(value, list):
        for item in value:
            _generated_names(item, found)


def _workload_names(value: Any, found: dict[str, str]) -> None:
    """Kueue's Workload names (``job-<name>-<5 hex of the owner's UID>``, from the annotation
    :data:`WORKLOAD_ANNOTATION`) → the name with ``x`` for its hash."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            match = re.fullmatch(r"(.+-)[0-9a-f]{5}", item) if isinstance(item, str) else None
            if key == WORKLOAD_ANNOTATION and match:
                found.setdefault(item, match.group(1) + "xxxxx")
            else:
                _workload_names(item, found)
    elif isinstance(value, list):
        for item in value:
            _workload_names(item, found)


def scrub(documents: Mapping[str, Any]) -> dict[str, Any]:
    """The documents (file name → JSON value) with volatile values made deterministic.

    Documents are taken in file-name order; in each, UIDs (any UUID-shaped text, in keys and in
    nested JSON too) are numbered in order of first appearance, so one object's UID is the same
    wherever it appears (a Job's ``uid``, its Pods' ``ownerReferences`` and ``controller-uid``
    labels), and so are ``resourceVersion`` values (``1000``, ``1001``…; equal stays equal).
    Timestamps become :data:`SCRUBBED_TIME`. Random suffixes become ``x`` characters: of a name made
    from ``generateName``, of Kueue's Workload name (a hash of the owner's UID) and of the
    ServiceAccount admission's ``kube-api-access-…`` volume. ``managedFields`` entries are sorted
    by manager, operation, subresource and apiVersion.
    """
    uids: dict[str, str] = {}
    versions: dict[str, str] = {}
    names: dict[str, str] = {}
    for name in sorted(documents):
        _walk_versions(documents[name], versions)
        _generated_names(documents[name], names)
        _workload_names(documents[name], names)

    def uid(match: re.Match[str]) -> str:
        return uids.setdefault(match.group(0), f"00000000-0000-4000-8000-{len(uids) + 1:012d}")

    out: dict[str, Any] = {}
    for name in sorted(documents):
        text = json.dumps(_replace_versions(documents[name], versions))
        text = _UUID.sub(uid, text)
        text = _TIME.sub(SCRUBBED_TIME, text)
        text = _TOKEN_VOLUME.sub(r"\1xxxxx", text)
        for generated, replacement in sorted(names.items(), key=lambda item: -len(item[0])):
            text = text.replace(generated, replacement)
        out[name] = json.loads(text)
    return out


# --------------------------------------------------------------------------- shapes


def shape(value: Any) -> Any:
    """The structure of a JSON value: every map key and list length, leaves by JSON type."""
    if isinstance(value, Mapping):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(item) for item in value]
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return "number" if isinstance(value, int | float) else "string"


def review_identity(review: Review) -> dict[str, Any]:
    """What an AdmissionReview is about: its apiVersion, the request's kind, resource, operation,
    dryRun and subResource, the object's kind."""
    request = review.get("request") or {}
    target = request.get("object") or request.get("oldObject") or {}
    return {
        "apiVersion": review.get("apiVersion"),
        **{key: request.get(key) for key in ("kind", "resource", "requestKind", "operation", "dryRun", "subResource")},
        "object": (target.get("apiVersion"), target.get("kind")),
    }


# --------------------------------------------------------------------------- kubectl


async def kubectl(kubeconfig: Path, home: Path, *args: str) -> tuple[int, str, str]:
    """``kubectl --kubeconfig=KUBECONFIG ARGS``: (exit code, stdout, stderr), without blocking the
    event loop (the recorder answers the API server from the same loop).

    Raises:
        RecordingError: kubectl is not on PATH.
    """
    binary = shutil.which("kubectl")
    if binary is None:
        raise RecordingError("kubectl is not on PATH (the recordings are made with kubectl, as a user would)")
    process = await asyncio.create_subprocess_exec(
        binary,
        f"--kubeconfig={kubeconfig}",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "NO_PROXY": "127.0.0.1,localhost"},
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=120)
    return process.returncode or 0, stdout.decode(), stderr.decode()


async def _kubectl_ok(kubeconfig: Path, home: Path, *args: str) -> str:
    code, stdout, stderr = await kubectl(kubeconfig, home, *args)
    if code != 0:
        raise RecordingError(f"kubectl {' '.join(args)} exited {code}: {stderr.strip()}")
    return stdout


# --------------------------------------------------------------------------- the AdmissionReviews


def _request(review: Review) -> dict[str, Any]:
    return dict(review.get("request") or {})


def _kind(review: Review) -> str:
    return str((_request(review).get("kind") or {}).get("kind"))


def _labels(obj: Any) -> dict[str, Any]:
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


def _is_job(review: Review, operation: str, dry_run: bool) -> bool:
    request = _request(review)
    return (
        _kind(review) == "Job"
        and request.get("operation") == operation
        and bool(request.get("dryRun")) is dry_run
        and request.get("name") == JOB_NAME
    )


def _starts_the_job(review: Review) -> bool:
    request = _request(review)
    old, new = request.get("oldObject") or {}, request.get("object") or {}
    return (
        _is_job(review, "UPDATE", False)
        and (old.get("spec") or {}).get("suspend") is True
        and (new.get("spec") or {}).get("suspend") is False
    )


def _pod_of_the_job(review: Review) -> bool:
    request = _request(review)
    owners = ((request.get("object") or {}).get("metadata") or {}).get("ownerReferences") or []
    return (
        _kind(review) == "Pod"
        and request.get("operation") == "CREATE"
        and any(owner.get("kind") == "Job" and owner.get("name") == JOB_NAME for owner in owners)
    )


#: Fixture file → which received AdmissionReview it is (the first one that matches).
REVIEWS: dict[str, Callable[[Review], bool]] = {
    "v1-job-create-dryrun.json": lambda review: _is_job(review, "CREATE", True),
    "v1-job-create.json": lambda review: _is_job(review, "CREATE", False),
    "v1-job-update-kueue-start.json": _starts_the_job,
    "v1-pod-of-job-create.json": _pod_of_the_job,
    "v1-job-update-queue-label.json": lambda review: (
        _is_job(review, "UPDATE", False)
        and _labels(_request(review).get("object")).get(QUEUE_LABEL) == OTHER_TEAMS_QUEUE
    ),
    "v1beta1-jobset-create.json": lambda review: (
        review.get("apiVersion") == "admission.k8s.io/v1beta1"
        and _kind(review) == "JobSet"
        and _request(review).get("operation") == "CREATE"
    ),
}


def _summary(reviews: list[Review]) -> str:
    return "; ".join(
        f"{review.get('apiVersion')} {_request(review).get('operation')} {_kind(review)} "
        f"{_request(review).get('name')!r} dryRun={_request(review).get('dryRun')}"
        for review in reviews
    )


def pick_reviews(received: list[Review]) -> dict[str, Review]:
    """Fixture file → the first received AdmissionReview of :data:`REVIEWS` it names.

    Raises:
        RecordingError: one is missing (the message lists what was received).
    """
    picked: dict[str, Review] = {}
    for name, matches in REVIEWS.items():
        found = next((review for review in received if matches(review)), None)
        if found is None:
            raise RecordingError(f"no AdmissionReview for {name}; the API server sent: {_summary(received)}")
        picked[name] = found
    return picked


async def _cleanup_workloads(kubeconfig: Path, home: Path) -> None:
    await kubectl(kubeconfig, home, "delete", "-n", NAMESPACE, "job", JOB_NAME, "--ignore-not-found", "--wait=true")
    await kubectl(kubeconfig, home, "delete", "-n", NAMESPACE, "jobsets", "-l", "app.kubernetes.io/name=llama-pretrain")


async def record_reviews(kubeconfig: Path, timeout: float = 180.0) -> dict[str, Review]:
    """Make the requests of the module docstring and return the raw AdmissionReviews the API
    server sent, by fixture file name (not scrubbed).

    The cluster must have the bundled platform applied and the governor registered. The Job and
    JobSet are deleted afterwards, and the recorder's configuration removed.

    Raises:
        RecordingError: a request failed where it should not, or was not refused where it should
            be, or an AdmissionReview is missing.
        support.WaitTimeout: the Job's pods did not become ready in ``timeout`` seconds.
    """
    with tempfile.TemporaryDirectory(prefix="kgov-kubectl-") as home_dir:
        home = Path(home_dir)
        async with ReviewRecorder() as recorder, devcluster.dynamic_client(kubeconfig) as dynamic:
            await _cleanup_workloads(kubeconfig, home)
            await devcluster.apply(dynamic, recorder.configuration(NAMESPACE))
            try:
                return await _make_requests(kubeconfig, home, recorder, dynamic, timeout)
            finally:
                await kubectl(kubeconfig, home, "delete", "mutatingwebhookconfiguration", RECORDER_CONFIGURATION)
                await _cleanup_workloads(kubeconfig, home)


async def _make_requests(
    kubeconfig: Path, home: Path, recorder: ReviewRecorder, dynamic: Any, timeout: float
) -> dict[str, Review]:
    # The API server picks up a new webhook configuration within a moment: probe until the
    # recorder sees a request, then start from an empty record.
    probe = ("create", "job", "review-recorder-probe", "-n", NAMESPACE, "--image=busybox", "--dry-run=server")

    async def in_effect() -> bool:
        await kubectl(kubeconfig, home, *probe)
        return any(_request(review).get("name") == "review-recorder-probe" for review in recorder.received)

    await support.wait_for(in_effect, f"{RECORDER_CONFIGURATION} to be called", 30, interval=0.5)
    recorder.received.clear()

    await _kubectl_ok(kubeconfig, home, "apply", "--dry-run=server", "-f", str(JOB_MANIFEST))
    await _kubectl_ok(kubeconfig, home, "apply", "-f", str(JOB_MANIFEST))

    async def running() -> bool:
        job = await support.get(dynamic, "batch/v1", "Job", JOB_NAME, NAMESPACE)
        status = (job or {}).get("status") or {}
        return status.get("active") == 2 and status.get("ready") == 2

    await support.wait_for(running, f"Job {JOB_NAME}'s 2 pods to be ready", timeout, interval=1)
    code, _, stderr = await kubectl(
        kubeconfig, home, "label", "job", JOB_NAME, "-n", NAMESPACE, f"{QUEUE_LABEL}={OTHER_TEAMS_QUEUE}", "--overwrite"
    )
    if code == 0 or "denied the request" not in stderr:
        raise RecordingError(f"the governor should refuse another team's queue; kubectl label: {code} {stderr}")
    await _kubectl_ok(kubeconfig, home, "create", "-f", str(JOBSET_MANIFEST))
    return pick_reviews(recorder.received)


# --------------------------------------------------------------------------- live objects


async def record_live_objects(kubeconfig: Path, platform: Path) -> list[dict[str, Any]]:
    """Every object ``kgov generate PLATFORM --namespaces`` makes, as the API server returns it
    to ``kgov diff`` (absent ones left out), in generation order (not scrubbed)."""
    manifests = build_manifests(load_platform(platform), GenerateOptions(namespaces=True))
    desired = [obj for objects in manifests.values() for obj in objects]
    state = await fetch_live(desired, str(kubeconfig))
    return [obj for obj in state.objects.values() if obj is not None]


# --------------------------------------------------------------------------- command line


def write_recordings(output: Path, reviews: Mapping[str, Review], live: list[dict[str, Any]], platform: Path) -> None:
    """Scrub (:func:`scrub`) and write the fixtures under ``output`` (``admission/``, ``live/``)."""
    documents = scrub({f"admission/{name}": review for name, review in reviews.items()})
    documents.update(scrub({LIVE_OBJECTS: live}))
    for name, document in documents.items():
        path = output / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document, indent=2) + "\n")
        print(f"wrote {path}", file=sys.stderr)
    (output / LIVE_PLATFORM).write_text(platform.read_text())
    print(f"wrote {output / LIVE_PLATFORM}", file=sys.stderr)


async def record_all(kubeconfig: Path) -> tuple[dict[str, Review], list[dict[str, Any]]]:
    """Both recordings on a cluster prepared as the module docstring says (live objects first,
    while nothing else has touched them)."""
    live = await record_live_objects(kubeconfig, support.BUNDLED_PLATFORM)
    return await record_reviews(kubeconfig), live


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.record", description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", type=Path, default=DATA, help="where admission/ and live/ go (tests/data)")
    parser.add_argument("--state", type=Path, help="state directory of a cluster to use (default: a fresh one)")
    args = parser.parse_args(argv)
    root = args.state or Path(tempfile.mkdtemp(prefix="kgov-record-"))
    fresh = devcluster.load_info(root) is None
    try:
        devcluster.up(root, governor_platform=support.BUNDLED_PLATFORM)
        devcluster.apply_platform(root, support.BUNDLED_PLATFORM)
        info = devcluster.load_info(root)
        assert info is not None
        reviews, live = asyncio.run(record_all(Path(info.kubeconfig)))
    except (RecordingError, devcluster.DevClusterError, support.WaitTimeout) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        if fresh:
            devcluster.down(root, purge=args.state is None)
    write_recordings(args.output_dir, reviews, live, support.BUNDLED_PLATFORM)
    return 0


if __name__ == "__main__":
    sys.exit(main())
