"""The stored routines stay readable: each one a screen (at most 80 lines, from its CREATE to the end of
its body), and each one's current text in exactly one file, its routine file: no migration after the
routine files began restates a routine that a file holds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shared.storage.migrator import available_migrations, available_routine_files

pytestmark = pytest.mark.timeout(30)

ROUTINES = Path(__file__).resolve().parents[2] / "shared" / "storage" / "routines"
ROUTINE_LINES_MAX = 80
# The last migration that restated routines; the routine files hold them from here on.
LAST_RESTATING_MIGRATION = 33
_CREATE = re.compile(r"^CREATE OR REPLACE FUNCTION (\w+)\(")
_ANY_CREATE = re.compile(r"CREATE (?:OR REPLACE )?FUNCTION\s+(?:public\.)?(\w+)\s*\(", re.IGNORECASE)


def routine_lengths(text: str) -> dict[str, int]:
    """Lines of each routine of a file: its CREATE line through the line that closes its body ($$ ... $$;)."""
    lengths: dict[str, int] = {}
    lines = text.splitlines()
    for start, line in enumerate(lines):
        match = _CREATE.match(line)
        if match is None:
            continue
        quotes = 0
        for end in range(start, len(lines)):
            quotes += lines[end].count("$$")
            if quotes >= 2 and lines[end].rstrip().endswith(";"):
                lengths[match[1]] = end - start + 1
                break
        else:
            raise AssertionError(f"{match[1]}: no end of its body")
    return lengths


def all_routine_lengths() -> dict[str, int]:
    lengths: dict[str, int] = {}
    for path in sorted(ROUTINES.glob("*.sql")):
        lengths.update({f"{path.stem}.{name}": n for name, n in routine_lengths(path.read_text()).items()})
    return lengths


def test_the_line_count_finds_every_routine_of_every_file() -> None:
    files = available_routine_files()
    assert len(all_routine_lengths()) == sum(len(f.routines) for f in files) > 0


def test_no_stored_routine_is_longer_than_a_screen() -> None:
    lengths = all_routine_lengths()
    too_long = {name: n for name, n in lengths.items() if n > ROUTINE_LINES_MAX}
    assert not too_long, f"routines over {ROUTINE_LINES_MAX} lines: {too_long}"


def test_no_migration_since_the_routine_files_restates_a_routine_of_a_file() -> None:
    """Landed migrations before the routine files keep their old texts (they are never edited); a later
    one that restated a routine would give it a second current text."""
    files = available_routine_files()
    in_files = {routine for f in files for routine in f.routines}
    restated = {
        f"{m.version:04d}_{m.name}": sorted(set(_ANY_CREATE.findall(m.sql)) & in_files)
        for m in available_migrations()
        if m.version > LAST_RESTATING_MIGRATION
    }
    assert {name: found for name, found in restated.items() if found} == {}
