"""The HTTP handlers of both ports: ``POST /mutate``, ``/healthz``, ``/readyz``, ``/metrics``.

Every error answer is JSON. A POST /mutate is refused on its headers alone when its body is
compressed (415) or declared over :data:`MAX_BODY_BYTES` (413), also before ``100-continue``; its
body must arrive within the body deadline (408). User values in logs are cut
(:func:`webhook.core.admission.envelope.clip`); metric labels come from closed sets (:mod:`webhook.serve.metrics`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.web_protocol import RequestPayloadError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from webhook.core.admission.envelope import MalformedReview, build_response, clip, decode_body, json_bytes
from webhook.core.admission.review import MESSAGE_PREFIX, ReviewOutcome, review
from webhook.core.plan.draft import Plan
from webhook.serve.connections import GuardedHandler
from webhook.serve.logs import get_logger
from webhook.serve.metrics import Metrics, kind_label, operation_label, rule_label
from webhook.serve.state import GovernorState

__all__ = ["MAX_BODY_BYTES", "STATE_KEY", "JsonAccessLogger", "make_app", "make_metrics_app"]

log = get_logger("kgov.server")

#: SPEC §5: bodies up to at least 3 MiB (an object and its oldObject near etcd's 1.5 MiB limit).
MAX_BODY_BYTES = 8 * 1024 * 1024
#: Longest user value (name, namespace, kind, uid, operation) in a log line, in characters.
LOG_ECHO_LIMIT = 256
#: Seconds a request waits for the namespace watch to deliver a namespace it has not seen yet (one
#: created together with its first workload), well inside the API server's webhook timeout
#: (5 s in the chart); then it is refused with a message to retry.
NAMESPACE_WAIT_SECONDS = 2.0


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
    metrics.child(metrics.requests, kind_label(request.kind), operation_label(request.operation), result).inc()
    for counter, rules in (
        (metrics.changes, [change.rule for change in outcome.plan.changes]),
        (metrics.denials, outcome.plan.denied_rules),
        (metrics.warnings, outcome.plan.warned_rules),
    ):
        per_rule: dict[str, int] = {}
        for rule in rules:
            per_rule[rule] = per_rule.get(rule, 0) + 1
        for rule, times in per_rule.items():  # one update per rule, not per change
            metrics.child(counter, rule_label(rule)).inc(times)


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
        if request.content.is_eof():  # the whole body came with the headers: nothing to wait for
            return await request.read()
        async with asyncio.timeout(state.config.limits.body_timeout):
            return await request.read()
    except TimeoutError:
        return "body_timeout", _error(408, f"request body not received within {state.config.limits.body_timeout:g} s")
    except web.HTTPRequestEntityTooLarge:
        return "body_too_large", _error(413, f"request body is over {MAX_BODY_BYTES} bytes")
    except (ConnectionError, RequestPayloadError, RuntimeError) as exc:
        protocol = request.protocol
        if isinstance(exc, RuntimeError) and protocol.transport is not None:
            raise  # aiohttp's "Connection closed." is a RuntimeError; any other is a real error
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
            outcome = review(body, state.teams, state.namespace_lookup, state.inventory, state.governor_user)
            if outcome.resolution.labels_unknown and state.namespace_wait is not None:
                outcome = await _after_namespace_wait(state, body, outcome)
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
        return web.Response(body=json_bytes(outcome.response), content_type="application/json", charset="utf-8")
    finally:
        state.in_flight -= 1
        metrics.child(metrics.latency, outcome_label).observe(time.perf_counter() - started)


async def _after_namespace_wait(state: GovernorState, body: Any, outcome: ReviewOutcome) -> ReviewOutcome:
    """A request in a namespace the namespace cache has not seen (created a moment ago, or a watch
    catching up after the API server came back): the namespace exists, since the API server is
    admitting an object into it, so wait up to :data:`NAMESPACE_WAIT_SECONDS` for the watch to
    deliver it and review again; still unknown, refuse with a 503 to be retried. Passing it
    unmutated would let a workload of a label-selected team through ungoverned."""
    assert state.namespace_wait is not None and state.teams is not None
    namespace = outcome.request.namespace
    if await state.namespace_wait(namespace, NAMESPACE_WAIT_SECONDS):
        state.metrics.namespace_waits.labels("seen").inc()
        return review(body, state.teams, state.namespace_lookup, state.inventory, state.governor_user)
    state.metrics.namespace_waits.labels("unseen").inc()
    message = (
        f"{MESSAGE_PREFIX}: namespace {namespace!r} is not in the governor's namespace cache yet "
        f"(waited {NAMESPACE_WAIT_SECONDS:g} s), so the team whose namespaceSelector selects it cannot be "
        "told; retry in a few seconds"
    )
    outcome.plan = Plan(denials=[message], denied_rules=["namespace"])
    outcome.patch = []
    outcome.response = build_response(outcome.request, allowed=False, message=message, code=503)
    return outcome


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
