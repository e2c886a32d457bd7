"""Arrays built whole in the binary format read back as the values they were made from."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import psycopg
import pytest

from shared.domain.ids import job_ids_from_block, new_job_id_block
from shared.storage import binary_arrays

pytestmark = pytest.mark.timeout(30)

MOMENTS = [
    datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    None,
    datetime(2040, 2, 29, 12, tzinfo=timezone(timedelta(hours=-5))),
]


def test_each_array_reads_back_as_its_values(database_url: str) -> None:
    block = new_job_id_block(3)
    arrays = {
        "uuids": (binary_arrays.uuids(block), "uuid[]", [uuid.UUID(j) for j in job_ids_from_block(block)]),
        "texts": (
            binary_arrays.texts(["echo", None, "ünï€😀", "echo", ""]),
            "text[]",
            ["echo", None, "ünï€😀", "echo", ""],
        ),
        "byteas": (binary_arrays.byteas([b"", b"\x00\xff", b"x" * 70000]), "bytea[]", [b"", b"\x00\xff", b"x" * 70000]),
        "int4s": (binary_arrays.int4s([0, -2147483648, 2147483647, 0]), "integer[]", [0, -2147483648, 2147483647, 0]),
        "int8s": (binary_arrays.int8s([1, -(2**63), 2**63 - 1]), "bigint[]", [1, -(2**63), 2**63 - 1]),
        "float8s": (binary_arrays.float8s([0.5, -1e300, 60.0]), "double precision[]", [0.5, -1e300, 60.0]),
        "times": (binary_arrays.timestamptzs(MOMENTS), "timestamptz[]", MOMENTS),
        "jsonbs": (
            binary_arrays.jsonb_objects([{}, {"a": "ü", "b": ""}, {}]),
            "jsonb[]",
            [None, {"a": "ü", "b": ""}, None],
        ),
    }
    with psycopg.connect(database_url) as conn:
        for name, (array, type_name, expected) in arrays.items():
            (got,) = conn.execute(f"SELECT %b::{type_name}", (array,)).fetchone()  # type: ignore[misc]
            got = [bytes(v) if isinstance(v, memoryview) else v for v in got]
            assert got == expected, name


def test_job_ids_of_a_block_are_uuid7_in_the_form_uuid_writes() -> None:
    before_ms = int(datetime.now(UTC).timestamp() * 1000)
    block = new_job_id_block(200)
    ids = job_ids_from_block(block)

    assert len(ids) == len(set(ids)) == 200
    for index, job_id in enumerate(ids):
        parsed = uuid.UUID(job_id)
        assert str(parsed) == job_id and parsed.bytes == block[16 * index : 16 * index + 16]
        assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
        assert 0 <= (parsed.int >> 80) - before_ms < 5000
