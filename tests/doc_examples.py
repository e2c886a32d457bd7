"""The runnable examples of the docs: code blocks marked `<!-- example: PATH -->` just above them, put
together per PATH in the order the pages show them (HANDLERS, then CLIENT)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.process_fixtures import REPO_ROOT

EXAMPLE_PAGES = (REPO_ROOT / "docs" / "HANDLERS.md", REPO_ROOT / "docs" / "CLIENT.md")
_MARKED_BLOCK = re.compile(r"^<!-- example: (\S+) -->\n```[a-z]*\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def doc_examples() -> dict[str, str]:
    """Each example file's text, as the docs write it."""
    files: dict[str, list[str]] = {}
    for page in EXAMPLE_PAGES:
        for path, body in _MARKED_BLOCK.findall(page.read_text(encoding="utf-8")):
            files.setdefault(path, []).append(body)
    return {path: "\n\n".join(parts) for path, parts in files.items()}


def write_doc_examples(root: Path) -> dict[str, Path]:
    """The example package, its tests and the caller, written under `root`."""
    written = {}
    for relative, text in doc_examples().items():
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        written[relative] = target
    return written
