"""The "Supported Kueue versions" paragraph: the same in the README and the docs' index, and its
row counts those of the transcribed tables (``tests/data/kueue/<version>/``)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from webhook.core.kueue.versions import DEFAULT_KUEUE_VERSION

REPO = Path(__file__).resolve().parent.parent
TABLES = REPO / "tests" / "data" / "kueue"


def _paragraph(path: Path) -> str:
    text = path.read_text()
    found = re.search(r"\*\*Supported Kueue versions:\*\*.*?\n\n", text, flags=re.S)
    assert found is not None, f"{path.name} has no 'Supported Kueue versions' paragraph"
    return found.group(0)


def test_the_readme_and_the_docs_index_say_the_same() -> None:
    assert _paragraph(REPO / "README.md") == _paragraph(REPO / "docs" / "index.md")


def test_the_row_counts_are_the_tables() -> None:
    rows = [
        row
        for path in sorted((TABLES / DEFAULT_KUEUE_VERSION).glob("*.yaml"))
        for row in yaml.safe_load(path.read_text())["rows"]
    ]
    modelled = [row for row in rows if "skip" not in row]
    text = " ".join(_paragraph(REPO / "README.md").split())
    assert f"{len(rows)} rows of Kueue's own unit-test tables" in text
    assert f"{len(modelled)} modelled, 0 disagreements" in text
