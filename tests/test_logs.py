"""``webhook.serve.logs``: string values bounded, lists cut to 100 items; cached loggers follow each configuration."""

from __future__ import annotations

import io
import json
import logging
from typing import Any

import pytest
import structlog

from webhook.serve.logs import LOG_VALUE_LIMIT, clip_values, configure_logging, get_logger


def test_short_values_are_kept_as_they_are() -> None:
    changes = ["queue:add", "topology:add"]
    event: dict[str, Any] = {"event": "admission", "name": "train", "changes": changes, "dry_run": False, "team": None}
    out = clip_values(None, "info", event)
    assert out == {
        "event": "admission",
        "name": "train",
        "changes": ["queue:add", "topology:add"],
        "dry_run": False,
        "team": None,
    }
    assert out["changes"] is changes  # nothing to cut: not copied


def test_long_strings_are_cut_with_a_marker() -> None:
    out = clip_values(None, "info", {"event": "x", "name": "n" * (LOG_VALUE_LIMIT + 500)})
    assert len(out["name"]) == LOG_VALUE_LIMIT
    cut = LOG_VALUE_LIMIT + 500 - LOG_VALUE_LIMIT + len("…[000 characters cut]…")
    assert f"…[{cut} characters cut]…" in out["name"]
    assert out["name"].startswith("nnn") and out["name"].endswith("nnn")


def test_lists_are_cut_to_100_items_and_their_strings_bounded() -> None:
    long_item = "w" * (LOG_VALUE_LIMIT * 2)
    out = clip_values(None, "info", {"event": "x", "many": [str(i) for i in range(250)], "one_long": ["a", long_item]})
    assert out["many"] == [str(i) for i in range(100)]
    assert out["one_long"][0] == "a" and len(out["one_long"][1]) == LOG_VALUE_LIMIT


def test_tuples_and_mixed_lists_become_bounded_lists() -> None:
    out = clip_values(None, "info", {"event": "x", "pair": ("a", "b" * (LOG_VALUE_LIMIT + 1)), "mixed": [1, "b", None]})
    assert out["pair"][0] == "a" and len(out["pair"][1]) == LOG_VALUE_LIMIT and isinstance(out["pair"], list)
    assert out["mixed"] == [1, "b", None]


def test_a_str_subclass_is_bounded_too() -> None:
    class Name(str):
        pass

    out = clip_values(None, "info", {"event": "x", "name": Name("z" * (LOG_VALUE_LIMIT + 10))})
    assert len(out["name"]) == LOG_VALUE_LIMIT


def test_a_cached_logger_follows_each_configuration() -> None:
    first, second = io.StringIO(), io.StringIO()
    log = get_logger("kgov.test")
    try:
        configure_logging("info", stream=first)
        log.info("one", value=1)
        log.debug("hidden")  # below the level
        configure_logging("debug", stream=second)
        log.info("two")
        log.debug("shown")
    finally:
        structlog.reset_defaults()
        logging.getLogger().handlers.clear()
    lines = [json.loads(line) for line in first.getvalue().splitlines()]
    assert [(line["event"], line["logger"], line["level"], line.get("value")) for line in lines] == [
        ("one", "kgov.test", "info", 1)
    ]
    assert [json.loads(line)["event"] for line in second.getvalue().splitlines()] == ["two", "shown"]


def test_a_cached_logger_binds_anew_once_structlog_is_reset(capsys: pytest.CaptureFixture[str]) -> None:
    buffer = io.StringIO()
    log = get_logger("kgov.test")
    configure_logging("info", stream=buffer)
    log.info("configured")
    structlog.reset_defaults()
    logging.getLogger().handlers.clear()
    log.info("after the reset")  # structlog's default logger (stdout), not the old stream
    assert [json.loads(line)["event"] for line in buffer.getvalue().splitlines()] == ["configured"]
    assert "after the reset" in capsys.readouterr().out
