"""The platform file's part of the chart's ``values.schema.json`` (SPEC §8 "the values carry the
platform file itself (same schema)").

``helm upgrade --install kgov helm/kueue-governor -f platform.yaml`` makes the platform file's keys
top-level values, so the chart's schema holds, next to the chart's own values, one property per
field of :class:`webhook.core.platform.models.Platform` and the platform models' definitions
(``$defs``), both taken from :func:`webhook.core.platform.platform.platform_json_schema` (pydantic's
JSON Schema of the models, the one ``kgov platform schema`` prints). Helm checks every values file
against it before rendering; the server checks the platform again, with its references, when it
compiles it. ``kgov chart schema --check`` (``make generate-check``) keeps the file in step.
"""

from __future__ import annotations

import json
from typing import Any

from webhook.core.platform.models import Platform
from webhook.core.platform.platform import platform_json_schema

__all__ = ["PLATFORM_KEYS", "render_values_schema", "values_schema"]

#: The platform file's top-level keys, in the models' order (the chart's ``kueue-governor.platformKeys``).
PLATFORM_KEYS = tuple(field.alias or name for name, field in Platform.model_fields.items())

#: Says, in the schema, where its platform part comes from.
_COMMENT = (
    "The properties " + ", ".join(PLATFORM_KEYS) + " and $defs are the platform file's schema, written by "
    "`kgov chart schema` from the platform models; do not edit them by hand."
)


def values_schema(current: dict[str, Any]) -> dict[str, Any]:
    """``current`` (the chart's values schema) with its platform part replaced by the models'.

    The chart's own properties keep their order and content; the platform keys follow them in the
    models' order; ``$defs`` is replaced whole. Raises ``KeyError`` when ``current`` has no
    ``properties`` (not the chart's schema).
    """
    platform = platform_json_schema()
    own = {key: value for key, value in current["properties"].items() if key not in PLATFORM_KEYS}
    properties = {**own, **{key: platform["properties"][key] for key in PLATFORM_KEYS}}
    head = {key: value for key, value in current.items() if key not in ("$comment", "properties", "$defs")}
    return {**head, "$comment": _COMMENT, "properties": properties, "$defs": platform["$defs"]}


def render_values_schema(current_text: str) -> str:
    """The text of ``values.schema.json`` for the current text (JSON, two-space indent, a final newline).

    Raises:
        ValueError: ``current_text`` is not JSON, or not an object with ``properties``.
    """
    current = json.loads(current_text)
    if not isinstance(current, dict) or not isinstance(current.get("properties"), dict):
        raise ValueError("not the chart's values schema: no properties")
    return json.dumps(values_schema(current), indent=2, ensure_ascii=False) + "\n"
