"""``kgov chart schema``: the platform file's part of the chart's values.schema.json, from the
platform models (SPEC §8: the values carry the platform file itself, same schema)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from support import REPO

from webhook.cli import main
from webhook.core.platform.models import Platform
from webhook.core.platform.platform import platform_json_schema
from webhook.generate.chart_schema import PLATFORM_KEYS, render_values_schema

SCHEMA = REPO / "helm" / "kueue-governor" / "values.schema.json"


def test_the_checked_in_schema_is_up_to_date() -> None:
    text = SCHEMA.read_text(encoding="utf-8")
    assert render_values_schema(text) == text


def test_the_platform_part_is_the_models_and_the_charts_own_values_stay() -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    platform = platform_json_schema()
    assert tuple(Platform.model_fields) == PLATFORM_KEYS
    for key in PLATFORM_KEYS:
        assert schema["properties"][key] == platform["properties"][key]
    assert schema["$defs"] == platform["$defs"]
    assert schema["additionalProperties"] is False
    assert {"image", "webhook", "certs", "platform", "kueueApply"} <= set(schema["properties"])


def test_check_fails_with_a_diff_when_a_model_field_is_missing(tmp_path: Path) -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    del schema["properties"]["teams"]
    stale = tmp_path / "values.schema.json"
    stale.write_text(json.dumps(schema, indent=2) + "\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["chart", "schema", "--out", str(stale), "--check"])
    assert result.exit_code == 1
    assert '+    "teams": {' in result.output
    assert "is out of date: run `kgov chart schema --out" in result.output
    written = CliRunner().invoke(main, ["chart", "schema", "--out", str(stale)])
    assert written.exit_code == 0, written.output
    assert stale.read_text(encoding="utf-8") == SCHEMA.read_text(encoding="utf-8")


def test_a_file_that_is_not_the_charts_schema_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "values.schema.json"
    other.write_text("[1, 2]\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["chart", "schema", "--out", str(other)])
    assert result.exit_code == 2
    assert "not the chart's values schema" in result.output
    assert other.read_text(encoding="utf-8") == "[1, 2]\n"
