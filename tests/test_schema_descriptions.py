"""Every property of the platform file's JSON Schema (`kgov schema`) has a description: the docs'
platform-file reference is generated from it (tools/docs_reference.py)."""

from __future__ import annotations

from typing import Any

from webhook.core.platform.platform import platform_json_schema


def _undescribed(schema: dict[str, Any]) -> list[str]:
    """``Model.field`` of every property without a non-empty description, the root as ``Platform``."""
    models = {"Platform": schema, **schema.get("$defs", {})}
    return [
        f"{model}.{name}"
        for model, body in models.items()
        for name, prop in body.get("properties", {}).items()
        if not str(prop.get("description", "")).strip()
    ]


def test_every_platform_property_has_a_description() -> None:
    schema = platform_json_schema()
    assert len(schema["$defs"]) >= 19
    assert _undescribed(schema) == []


def test_the_walk_finds_a_property_without_one() -> None:
    schema = {"properties": {"a": {"type": "string"}}, "$defs": {"X": {"properties": {"b": {"description": " "}}}}}
    assert _undescribed(schema) == ["Platform.a", "X.b"]
