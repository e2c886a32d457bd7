"""Links in the docs are true: every relative link names a file or folder of the checkout, and every
anchor a heading of the page it points into (as GitHub makes them from the heading's text)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(30)

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted([REPO / "README.md", REPO / "tests" / "README.md", *(REPO / "docs").glob("*.md")])
# [text](target): the target up to the first space or closing parenthesis; code spans are left out.
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.DOTALL)
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.MULTILINE)


def _slug(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(h) for h in _HEADING.findall(_CODE.sub("", page.read_text(encoding="utf-8")))}


def _links(page: Path) -> list[str]:
    return _LINK.findall(_CODE.sub("", page.read_text(encoding="utf-8")))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in _links(page):
        if re.match(r"^[a-z][a-z+.-]*:", target):  # http:, https:, mailto: are not checked here
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        exists = resolved.exists()
        anchor_missing = exists and anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved)
        if not exists or anchor_missing:
            broken.append(target)
    assert broken == []
