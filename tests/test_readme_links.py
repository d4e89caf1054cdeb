"""Every relative link of the README resolves: to a file or directory of the repository and, with
a ``#fragment``, to a heading of that Markdown file (GitHub's anchors) or an ``id`` in it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support import REPO

README = REPO / "README.md"
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_CODE = re.compile(r"```.*?```", re.DOTALL)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but ``-`` and ``_`` dropped, spaces to ``-``."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors a Markdown file defines: its headings' (outside code blocks) and explicit ``id``s."""
    text = _CODE.sub("", path.read_text(encoding="utf-8"))
    found = {_anchor(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}
    return found | set(re.findall(r'id="([^"]+)"', text))


def broken_links(markdown: Path) -> list[str]:
    """The relative links of ``markdown`` (outside code blocks) whose file or anchor does not exist."""
    text = _CODE.sub("", markdown.read_text(encoding="utf-8"))
    broken = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, fragment = target.partition("#")
        file = (markdown.parent / path).resolve() if path else markdown
        if not file.exists() or (fragment and (file.suffix != ".md" or fragment not in anchors(file))):
            broken.append(target)
    return broken


def test_every_relative_link_of_the_readme_resolves() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(_LINK.findall(text)) >= 15
    assert broken_links(README) == []


def test_the_readme_is_short() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) < 200


@pytest.mark.parametrize(
    ("link", "broken"),
    [
        ("docs/concepts.md", False),
        ("docs/nope.md", True),
        ("docs/concepts.md#teams-and-namespaces", False),
        ("docs/concepts.md#nope", True),
        ("docs/", False),
        ("#layout", False),
        ("#nope", True),
        ("https://x.example/y", False),
    ],
)
def test_a_broken_link_is_found(tmp_path: Path, link: str, broken: bool) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "concepts.md").write_text("# Concepts\n\n## Teams and namespaces\n", encoding="utf-8")
    page = tmp_path / "README.md"
    page.write_text(f"## Layout\n\n[x]({link})\n\n```\n[y](docs/nope.md)\n```\n", encoding="utf-8")
    assert broken_links(page) == ([link] if broken else [])
