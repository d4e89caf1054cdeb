"""Structured JSON logs (structlog) on stderr: one JSON object per line, whoever logs.

structlog events and the standard library's records (aiohttp's server and access loggers,
asyncio, warnings) go through the same :class:`structlog.stdlib.ProcessorFormatter`, so a
traceback is a field of one line, never lines of its own. Every string value is cut to
:data:`LOG_VALUE_LIMIT` characters with a marker (:func:`webhook.core.admission.clip`), so no
client can make a log line of megabytes. Never log tokens, keys, header values or object bodies.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

from webhook.core.admission import clip

__all__ = ["LOG_VALUE_LIMIT", "clip_values", "configure_logging"]

#: Longest string value in a log line, in characters (a traceback included).
LOG_VALUE_LIMIT = 4096


def _clipped(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return clip(value, limit)
    if isinstance(value, list | tuple):
        return [_clipped(item, limit) for item in value[:100]]
    return value


def clip_values(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: bound every string (and list of strings) in the event."""
    for key, value in event.items():
        event[key] = _clipped(value, LOG_VALUE_LIMIT)
    return event


def configure_logging(level: str = "info", json_output: bool = True, stream: TextIO | None = None) -> None:
    """Route structlog and the standard library's loggers (aiohttp, asyncio) to ``stream``
    (default stderr) as JSON lines.

    ``level``: debug, info, warning or error (aiohttp's access log is at debug).
    """
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json_output else structlog.dev.ConsoleRenderer(colors=False)
    )
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.stdlib.LoggerFactory(),
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
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    logging.captureWarnings(True)
