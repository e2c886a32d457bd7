"""One-dimensional arrays in PostgreSQL's binary format (array_recv), built whole for the batch statements.

psycopg adapts a list value by value in Python, about a fifth of a microsecond each: for a batch of plain
submissions, a dozen columns, that was most of the insert's client CPU. Here each column is one `bytes`
object made from its values (the same value framed once: a batch's kinds, priorities and empty labels
repeat). The statement's text is unchanged: its `%(name)b::type[]` placeholders receive arrays of that
type, as psycopg's own dumpers would send them.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Hashable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import ClassVar, TypeVar

import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format

T = TypeVar("T", bound=Hashable)
A = TypeVar("A", bound="BinaryArray")

_NULL = b"\xff\xff\xff\xff"
_LENGTH = struct.Struct(">i")
_HEADER = struct.Struct(">iiiii")
_INT4 = struct.Struct(">ii")
_INT8 = struct.Struct(">iq")
_FLOAT8 = struct.Struct(">id")
# timestamptz travels as microseconds since 2000-01-01 UTC.
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_UUID_BYTES = 16


class BinaryArray(bytes):
    """An array already in the wire format; a subclass per element type carries the array type's oid."""

    oid: ClassVar[int]


class UuidArray(BinaryArray):
    oid = 2951


class TextArray(BinaryArray):
    oid = 1009


class ByteaArray(BinaryArray):
    oid = 1001


class Int4Array(BinaryArray):
    oid = 1007


class Int8Array(BinaryArray):
    oid = 1016


class Float8Array(BinaryArray):
    oid = 1022


class TimestamptzArray(BinaryArray):
    oid = 1185


class JsonbArray(BinaryArray):
    oid = 3807


def _element_oid(array_oid: int) -> int:
    return {2951: 2950, 1009: 25, 1001: 17, 1007: 23, 1016: 20, 1022: 701, 1185: 1184, 3807: 3802}[array_oid]


def _array(kind: type[A], count: int, elements: Iterable[bytes], has_null: bool) -> A:
    header = _HEADER.pack(1, int(has_null), _element_oid(kind.oid), count, 1)
    return kind(header + b"".join(elements))


def _framed(values: Sequence[T | None], encode: Callable[[T], bytes]) -> tuple[list[bytes], bool]:
    """Each value as an element (its length, then its bytes), each distinct value encoded once."""
    distinct = dict.fromkeys(values)
    elements = {value: _NULL if value is None else encode(value) for value in distinct}
    return list(map(elements.__getitem__, values)), None in distinct


def _text(value: str) -> bytes:
    data = value.encode()
    return _LENGTH.pack(len(data)) + data


def _jsonb(value: str) -> bytes:
    data = b"\x01" + value.encode()  # jsonb's binary format: a version byte, then the text
    return _LENGTH.pack(len(data)) + data


def _timestamptz(value: datetime) -> bytes:
    return _INT8.pack(8, (value - _PG_EPOCH) // _MICROSECOND)


def uuids(packed: bytes) -> UuidArray:
    """UUIDs given as their 16 bytes each, one after another."""
    count = len(packed) // _UUID_BYTES
    # Each element is its length (16, in four bytes) and the UUID, filled in a byte position at a time.
    step = _LENGTH.size + _UUID_BYTES
    elements = bytearray(step * count)
    elements[_LENGTH.size - 1 :: step] = bytes([_UUID_BYTES]) * count
    for offset in range(_UUID_BYTES):
        elements[_LENGTH.size + offset :: step] = packed[offset::_UUID_BYTES]
    return _array(UuidArray, count, [bytes(elements)], False)


def texts(values: Sequence[str | None]) -> TextArray:
    elements, has_null = _framed(values, _text)
    return _array(TextArray, len(values), elements, has_null)


def byteas(values: Sequence[bytes]) -> ByteaArray:
    elements: list[bytes] = [b""] * (2 * len(values))
    elements[0::2] = map(_LENGTH.pack, map(len, values))
    elements[1::2] = values
    return _array(ByteaArray, len(values), elements, False)


def int4s(values: Sequence[int]) -> Int4Array:
    elements, _ = _framed(values, lambda value: _INT4.pack(4, value))
    return _array(Int4Array, len(values), elements, False)


def int8s(values: Sequence[int]) -> Int8Array:
    elements, _ = _framed(values, lambda value: _INT8.pack(8, value))
    return _array(Int8Array, len(values), elements, False)


def float8s(values: Sequence[float]) -> Float8Array:
    elements, _ = _framed(values, lambda value: _FLOAT8.pack(8, value))
    return _array(Float8Array, len(values), elements, False)


def timestamptzs(values: Sequence[datetime | None]) -> TimestamptzArray:
    elements, has_null = _framed(values, _timestamptz)
    return _array(TimestamptzArray, len(values), elements, has_null)


def jsonb_objects(values: Sequence[dict[str, str]]) -> JsonbArray:
    """Objects as jsonb, an empty one as NULL (the statement stores '{}' for it)."""
    texts_ = [json.dumps(value) if value else None for value in values] if any(values) else [None] * len(values)
    elements, has_null = _framed(texts_, _jsonb)
    return _array(JsonbArray, len(values), elements, has_null)


class _BinaryArrayDumper(Dumper):
    format = Format.BINARY

    def dump(self, obj: BinaryArray) -> bytes:
        return obj


def _register() -> None:
    """Each array type with a dumper that sends its bytes as they are, under its own oid."""
    for kind in BinaryArray.__subclasses__():
        dumper = type(f"{kind.__name__}Dumper", (_BinaryArrayDumper,), {"oid": kind.oid})
        psycopg.adapters.register_dumper(kind, dumper)


_register()
