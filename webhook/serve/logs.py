"""Structured JSON logs (structlog) on stderr: one JSON object per line, whoever logs.

structlog events (the server's own, one per admission among them) and the standard library's
records (aiohttp's server and access loggers, asyncio, warnings) get the same fields (``event``,
``level``, ``logger``, ``timestamp``) and the same rendering, so a traceback is a field of one line,
never lines of its own. structlog events are rendered by structlog's processors and written
straight to the handler's stream (:class:`LineLogger`): the standard library's record, handler
and formatter machinery cost as much as the admission itself; its records still go through
:class:`structlog.stdlib.ProcessorFormatter` with the same processors. Lines are rendered with
orjson (the standard library's encoder for what orjson refuses). Every string value is cut to
:data:`LOG_VALUE_LIMIT` characters with a marker (:func:`webhook.core.admission.envelope.clip`), so no
client can make a log line of megabytes. Never log tokens, keys, header values or object bodies.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

import orjson
import structlog

from webhook.core.admission.envelope import clip

__all__ = ["LOG_VALUE_LIMIT", "CachedLogger", "LineLogger", "clip_values", "configure_logging", "get_logger"]

#: Longest string value in a log line, in characters (a traceback included).
LOG_VALUE_LIMIT = 4096
#: Counts :func:`configure_logging` calls: a :class:`CachedLogger` bound under another is rebound.
_generation = 0


def _clipped(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return clip(value, limit)
    if isinstance(value, list | tuple):
        return [_clipped(item, limit) for item in value[:100]]
    return value


def _within(values: list[Any] | tuple[Any, ...], limit: int) -> bool:
    """A list of at most 100 strings, none over ``limit``: nothing in it to cut or to copy."""
    return len(values) <= 100 and all(type(item) is str and len(item) <= limit for item in values)


def clip_values(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: bound every string (and list of strings) in the event.

    Values already within bounds (nearly all: the server cuts what it echoes) are left as they
    are, not copied; a list is cut to its first 100 items."""
    limit = LOG_VALUE_LIMIT
    for key, value in event.items():
        if isinstance(value, str):
            if len(value) > limit:
                event[key] = clip(value, limit)
        elif isinstance(value, list | tuple) and not (type(value) is list and _within(value, limit)):
            event[key] = _clipped(value, limit)
    return event


def _dumps(event: Any, **kwargs: Any) -> str:
    """structlog's JSON serializer: orjson, or the standard library's encoder for what orjson
    refuses (a lone surrogate, an integer beyond 64 bits); ``default`` renders other objects."""
    try:
        return orjson.dumps(event, default=kwargs.get("default")).decode()
    except TypeError:
        return json.dumps(event, **kwargs)


class LineLogger:
    """structlog's wrapped logger: writes each rendered event as one line to the stream of the
    standard library's ``handler``, under the handler's lock (so a line never interleaves with a
    record the handler writes). ``name``: the logger's name, the ``logger`` field."""

    def __init__(self, handler: logging.StreamHandler[TextIO], name: str = "") -> None:
        self.handler = handler
        self.name = name

    def msg(self, message: str) -> None:
        handler = self.handler
        handler.acquire()
        try:
            handler.stream.write(message + "\n")
            handler.stream.flush()
        finally:
            handler.release()

    debug = info = warning = warn = error = critical = exception = fatal = log = msg


class CachedLogger:
    """``structlog.get_logger(name)``, bound once per :func:`configure_logging` call instead of at
    every call. structlog's lazy proxy (``cache_logger_on_first_use=False``, so that a new
    configuration takes effect) builds a new bound logger, wrapped logger and context for each
    event: a quarter of the admission log line's cost. While structlog is not configured (before
    :func:`configure_logging`, or after ``structlog.reset_defaults()``) each call binds anew, as the
    proxy does. Logging methods: those of structlog's bound loggers (``info``, ``warning``...)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._bound: Any = None
        self._generation = -1

    def __getattr__(self, method: str) -> Any:
        if not structlog.is_configured():
            return getattr(structlog.get_logger(self.name).bind(), method)
        if self._generation != _generation:
            self._bound = structlog.get_logger(self.name).bind()
            self._generation = _generation
        return getattr(self._bound, method)


def get_logger(name: str) -> Any:
    """A :class:`CachedLogger` named ``name`` (the ``logger`` field of its lines)."""
    return CachedLogger(name)


def configure_logging(level: str = "info", json_output: bool = True, stream: TextIO | None = None) -> None:
    """Route structlog and the standard library's loggers (aiohttp, asyncio) to ``stream``
    (default stderr) as JSON lines.

    ``level``: debug, info, warning or error (aiohttp's access log is at debug).
    """
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer(serializer=_dumps)
        if json_output
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    handler = logging.StreamHandler(stream or sys.stderr)
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, clip_values, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=lambda name="", *_: LineLogger(handler, name),
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.ExtraAdder()],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            clip_values,
            renderer,
        ],
    )
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    logging.captureWarnings(True)
    global _generation
    _generation += 1
