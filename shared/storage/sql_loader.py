"""Reads named SQL blocks (`-- name: x` then a purpose line) from the files in sql/."""

from __future__ import annotations

import re
from importlib import resources

_NAME_LINE = re.compile(r"^-- name: ([a-z_]+)\s*$", re.MULTILINE)


def load_sql_blocks(filename: str, package: str = "shared.storage") -> dict[str, str]:
    """Maps each block's name to its statement text (without the trailing semicolon), from the `sql`
    folder of `package`."""
    text = resources.files(package).joinpath("sql", filename).read_text(encoding="utf-8")
    parts = _NAME_LINE.split(text)
    blocks: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = body.strip().splitlines()
        if not lines or not lines[0].startswith("-- "):
            raise ValueError(f"{filename}: block {name!r} must start with a one-line purpose comment")
        statement = "\n".join(lines[1:]).strip().rstrip(";")
        if name in blocks:
            raise ValueError(f"{filename}: block {name!r} defined twice")
        blocks[name] = statement
    return blocks
