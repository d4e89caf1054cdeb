"""Connections on the webhook port: TLS, deadlines, a cap on their number, and draining.

aiohttp serves HTTP; this module decides which connections it gets to serve and for how long:

- :class:`TlsGate` is what the listening socket accepts. Over the cap it first closes the
  connection that has waited longest without a request in progress (an idle keep-alive, a stalled
  handshake or header); when every connection is busy it drops the new one before any TLS work.
  Otherwise it runs the TLS handshake (``loop.start_tls``, bounded by the header deadline) and
  hands the connection to a :class:`GuardedHandler`.
- :class:`GuardedHandler` is aiohttp's :class:`~aiohttp.web_protocol.RequestHandler` with a
  header deadline (from the connection's start, or from a request's first byte on a kept-alive
  connection, to the handler being called) and JSON answers and logs for what aiohttp's HTTP
  parser refuses. The body deadline is the handler's (``webhook.serve.server``); the idle (keep-alive)
  timeout is aiohttp's own ``keepalive_timeout``.

Connections the server gives up on are aborted, not closed politely: a TLS close waits for the
peer's close_notify, which a hostile client never sends, and the connection's buffers (about
300 KiB with asyncio's TLS) would stay allocated meanwhile.
"""

from __future__ import annotations

import asyncio
import gc
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web
from aiohttp.http_exceptions import BadStatusLine, HttpProcessingError, LineTooLong, PayloadEncodingError
from aiohttp.web_protocol import RequestHandler

from webhook.serve.memory import release_freed_memory
from webhook.serve.metrics import Metrics

__all__ = ["ConnectionLimits", "ConnectionTracker", "GuardedHandler", "TlsGate", "parser_error_reason"]

log = structlog.get_logger("kgov.connections")


@dataclass(frozen=True)
class ConnectionLimits:
    """Deadlines (seconds) and the connection cap of the webhook port; defaults suit an API server.

    ``header_timeout``: the TLS handshake, and then a request's line and headers (from the
    request's first byte). ``body_timeout``: the
    whole body once the headers are in (the API server sends at most a few MiB at once).
    ``idle_timeout``: a connection with no request in progress and no byte of the next one, fresh
    from its handshake or kept alive; longer than the 90 s the API server's Go client keeps idle
    connections (``http.DefaultTransport``), so the server is never the side that closes a
    connection the client is about to reuse. (Go parks a connection it dialled for a request
    that another connection served first: it is fresh, yet idle; closing it at the header
    deadline raced with its first use and failed the API server's webhook call.) Idle
    connections still give way at the cap, longest waiting first. ``max_connections``: open
    connections, handshakes included (each costs about 275 KiB: 256 of them, about 70 MiB; an API
    server needs one per concurrent call). ``lingering_time``: how long an
    unread body is drained after an early answer (413/415) so the client reads that answer.
    """

    header_timeout: float = 10.0
    body_timeout: float = 10.0
    idle_timeout: float = 120.0
    max_connections: int = 256
    lingering_time: float = 1.0


#: Freed memory is handed back to the OS once the open connections fall to a quarter of their peak,
#: when that peak was at least this many connections (that is, after a burst, not during one).
RELEASE_AFTER_PEAK = 64


class ConnectionTracker:
    """Every open connection of the webhook port, in handshake (:class:`TlsGate`) or served
    (:class:`GuardedHandler`); enforces the cap, closes connections when draining, and returns
    the memory of closed connections to the OS (:func:`webhook.serve.memory.release_freed_memory`)."""

    def __init__(self, limits: ConnectionLimits, metrics: Metrics) -> None:
        self.limits = limits
        self.metrics = metrics
        self.connections: set[TlsGate | GuardedHandler] = set()
        #: Connections without a request in progress, longest waiting first (insertion order).
        self.waiting: dict[TlsGate | GuardedHandler, None] = {}
        self.draining = False
        self.empty = asyncio.Event()
        self.empty.set()
        self._peak = 0
        self._release: asyncio.TimerHandle | None = None

    def add(self, connection: TlsGate | GuardedHandler) -> None:
        self.connections.add(connection)
        self.waiting[connection] = None
        self.empty.clear()
        self._peak = max(self._peak, len(self.connections))
        self.metrics.connections.set(len(self.connections))

    def busy(self, connection: GuardedHandler) -> None:
        self.waiting.pop(connection, None)

    def idle(self, connection: GuardedHandler) -> None:
        """``connection`` waits for a request again: it becomes the most recent waiter."""
        if connection in self.connections:
            self.waiting.pop(connection, None)
            self.waiting[connection] = None

    def discard(self, connection: TlsGate | GuardedHandler) -> None:
        if connection not in self.connections:
            return
        self.connections.discard(connection)
        self.waiting.pop(connection, None)
        self.metrics.connections.set(len(self.connections))
        if not self.connections:
            self.empty.set()
        if self._peak >= RELEASE_AFTER_PEAK and len(self.connections) <= self._peak // 4 and self._release is None:
            self._release = asyncio.get_running_loop().call_later(1.0, self._release_memory)

    def _release_memory(self) -> None:
        """After a burst of connections: collect their reference cycles, then return the pages."""
        self._release = None
        if len(self.connections) > self._peak // 4:
            return  # another burst began
        self._peak = len(self.connections)
        started = time.perf_counter()
        gc.collect()
        released = release_freed_memory()
        log.info("returned the memory of closed connections", released=released, seconds=time.perf_counter() - started)

    def make_room(self) -> bool:
        """At the cap, abort the connection waiting longest without a request; False if all are busy."""
        if len(self.connections) < self.limits.max_connections:
            return True
        if not self.waiting:
            return False
        next(iter(self.waiting)).abort("over_limit")
        return True

    def close_waiting(self) -> None:
        """Draining: abort handshakes and close idle kept-alive connections (no byte of a request
        received); connections reading a request or being answered finish it."""
        self.draining = True
        for connection in list(self.connections):
            if isinstance(connection, TlsGate):
                connection.abort("shutdown")
            elif connection.idle:
                connection.close_gently()

    def abort_all(self) -> None:
        for connection in list(self.connections):
            connection.abort("shutdown")


_PARSER_REASONS: tuple[tuple[type[BaseException], str], ...] = (
    (LineTooLong, "the request line or a header is too long"),
    (BadStatusLine, "the request line is not HTTP/1.1"),
    (PayloadEncodingError, "the body's framing (Content-Length or chunked encoding) is invalid"),
)


def parser_error_reason(exc: BaseException | None) -> str:
    """A fixed sentence for an HTTP parser error: never the offending bytes (a header value)."""
    for kind, reason in _PARSER_REASONS:
        if isinstance(exc, kind):
            return reason
    return "the request's headers or its chunked framing are malformed"


class GuardedHandler(RequestHandler):
    """aiohttp's request handler with a header deadline, JSON errors and draining.

    The application marks requests with :meth:`request_started` / :meth:`request_finished`
    (a middleware), which is how this handler knows the headers are in and when it is idle.
    """

    def __init__(self, manager: web.Server, tracker: ConnectionTracker, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.tracker = tracker
        self.busy = False
        #: Why the server dropped this connection (None: it did not).
        self.dropped: str | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._idle_deadline: asyncio.TimerHandle | None = None
        self._received = False

    @property
    def idle(self) -> bool:
        """No request in progress and no byte of the next one received."""
        return not self.busy and self._deadline is None

    # -- asyncio protocol ------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if not self.busy and self._deadline is None and not self._received:
            # Fresh and idle (a request that came with the TLS Finished has armed the header deadline).
            self._idle_deadline = self._loop.call_later(self.tracker.limits.idle_timeout, self._idle_deadline_passed)

    def data_received(self, data: bytes) -> None:
        # aiohttp calls this with b"" itself to re-parse what it buffered: that is no new request.
        if data:
            self._received = True
            self._disarm_idle()
        if data and not self.busy and self._deadline is None:
            self._arm_header_deadline()
        super().data_received(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        self._disarm_idle()
        self.tracker.discard(self)
        super().connection_lost(exc)

    # -- requests ---------------------------------------------------------------------------------
    def request_started(self) -> None:
        """Headers in: the body is being read. Until it is, the connection may still be dropped at
        the cap (a body trickled by a hostile client must not pin a slot)."""
        self._disarm()
        self.busy = True
        self.tracker.idle(self)

    def body_received(self) -> None:
        """The whole body is in: the request is being answered and the connection is never dropped."""
        self.tracker.busy(self)

    def request_finished(self) -> None:
        self._disarm()
        self.busy = False
        self.tracker.idle(self)

    def _arm_header_deadline(self) -> None:
        self._disarm()
        self._deadline = self._loop.call_later(self.tracker.limits.header_timeout, self._header_deadline_passed)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _disarm_idle(self) -> None:
        if self._idle_deadline is not None:
            self._idle_deadline.cancel()
            self._idle_deadline = None

    def _idle_deadline_passed(self) -> None:
        """A fresh connection never used: closed gently (TLS close_notify), as a kept-alive one is."""
        self._idle_deadline = None
        if not self.busy and not self._received:
            log.info("closed a connection: no request since its handshake", reason="idle_timeout")
            self.dropped = "idle_timeout"
            self.tracker.metrics.connections_closed.labels("idle_timeout").inc()
            self.close_gently()
            self.tracker.discard(self)

    def _header_deadline_passed(self) -> None:
        self._deadline = None
        if not self.busy:
            log.info("closed a connection: no complete request headers in time", reason="header_timeout")
            self.abort("header_timeout")

    # -- closing ----------------------------------------------------------------------------------
    def close_gently(self) -> None:
        """Close after the current request, if any (TLS close_notify is sent)."""
        self.force_close()

    def abort(self, reason: str) -> None:
        """Drop the connection now, without waiting for the peer (counted under ``reason``)."""
        self.dropped = reason
        self.tracker.metrics.connections_closed.labels(reason).inc()
        transport = self.transport
        self._disarm()
        self._disarm_idle()
        self.force_close()
        if transport is not None:
            transport.abort()
        self.tracker.discard(self)

    # -- errors ------------------------------------------------------------------------------------
    def handle_error(
        self, request: Any, status: int = 500, exc: BaseException | None = None, message: str | None = None
    ) -> web.StreamResponse:
        """A JSON answer and one JSON log line for what the HTTP parser (400) or aiohttp refuses."""
        if request.writer.output_size > 0:
            raise ConnectionError("the answer was already being sent; cannot send an error instead")
        if status == 400 or isinstance(exc, HttpProcessingError):
            reason = parser_error_reason(exc)
            self.tracker.metrics.refused.labels("bad_request").inc()
            log.warning("HTTP request refused by the parser", status=status, reason=reason, error=type(exc).__name__)
            body = {"error": f"bad HTTP request: {reason}"}
        else:
            self.tracker.metrics.internal_errors.inc()
            log.error("internal error while serving a request; answered 500", status=status, exc_info=exc)
            body = {"error": "internal error in kueue-governor; see its log"}
        response = web.json_response(body, status=status)
        response.force_close()
        return response


class TlsGate(asyncio.Protocol):
    """What the listening socket accepts: the cap, then the TLS handshake, then aiohttp.

    ``make_handler`` builds the :class:`GuardedHandler` that serves the connection once TLS is up.
    """

    def __init__(
        self,
        tracker: ConnectionTracker,
        context: ssl.SSLContext,
        make_handler: Callable[[], GuardedHandler],
    ) -> None:
        self.tracker = tracker
        self.context = context
        self.make_handler = make_handler
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        if self.tracker.draining or not self.tracker.make_room():
            self.tracker.metrics.connections_closed.labels(
                "over_limit" if not self.tracker.draining else "shutdown"
            ).inc()
            transport.abort()
            return
        loop = asyncio.get_running_loop()
        self.transport = transport
        self.tracker.add(self)
        transport.pause_reading()  # no byte of the ClientHello before start_tls takes the transport
        self.task = loop.create_task(self._handshake(transport))

    async def _handshake(self, transport: asyncio.Transport) -> None:
        loop = asyncio.get_running_loop()
        handler = self.make_handler()
        timeout = self.tracker.limits.header_timeout
        try:
            tls = await loop.start_tls(
                transport,
                handler,
                self.context,
                server_side=True,
                ssl_handshake_timeout=timeout,
                ssl_shutdown_timeout=min(timeout, 2.0),
            )
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError, asyncio.CancelledError) as exc:
            if self in self.tracker.connections:
                self.tracker.metrics.connections_closed.labels("tls_handshake_failed").inc()
                log.debug("TLS handshake failed", error=type(exc).__name__)
            transport.abort()
            self.tracker.discard(self)
            return
        finally:
            self.task = None
        self.tracker.discard(self)
        if tls is None or transport.is_closing():
            return
        self.tracker.add(handler)
        handler.connection_made(tls)

    def connection_lost(self, exc: BaseException | None) -> None:
        # Only while no handshake took the transport over (start_tls replaces this protocol).
        self.tracker.discard(self)

    def abort(self, reason: str) -> None:
        self.tracker.metrics.connections_closed.labels(reason).inc()
        self.tracker.discard(self)
        if self.task is not None:
            self.task.cancel()
        if self.transport is not None:
            self.transport.abort()
