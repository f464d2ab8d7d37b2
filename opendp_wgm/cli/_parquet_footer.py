"""The top-level column names a Parquet file's footer states, duplicates kept, read without pyarrow.

Polars' schema of a Parquet file keeps one column of a repeated name (the last), so the command reads the names
from the footer itself to refuse such a file (:func:`opendp_wgm.cli._io._check_unique_names`). pyarrow can, but
importing ``pyarrow.parquet`` costs 0.05 to 0.1 s of every release (``docs/performance.md``, "Start-up"); the
footer is small. A Parquet file ends with its metadata (a Thrift ``FileMetaData`` in the compact protocol), the
metadata's length (4 bytes, little-endian) and ``PAR1``. Field 2 of ``FileMetaData`` is the schema: a list of
``SchemaElement`` in depth-first order, the root first; an element's field 4 is its name and field 5 its number
of children. The top-level columns are the root's children (parquet-format's ``parquet.thrift``).
"""

from __future__ import annotations

from pathlib import Path

_MAGIC = b"PAR1"
#: Compact-protocol type ids (Thrift's ``TCompactProtocol``).
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)


class _FooterError(ValueError):
    """The footer is not Parquet's, or not as this reader knows it."""


class _Reader:
    """A cursor over compact-protocol bytes: varints, strings, and a skip of any value."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def byte(self) -> int:
        if self.at >= len(self.data):
            raise _FooterError("truncated footer")
        self.at += 1
        return self.data[self.at - 1]

    def varint(self) -> int:
        value = shift = 0
        while True:
            b = self.byte()
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7
            if shift > 70:
                raise _FooterError("varint too long")

    def zigzag(self) -> int:
        value = self.varint()
        return (value >> 1) ^ -(value & 1)

    def binary(self) -> bytes:
        size = self.varint()
        if self.at + size > len(self.data):
            raise _FooterError("truncated string")
        self.at += size
        return self.data[self.at - size : self.at]

    def field(self, last: int) -> tuple[int, int]:
        """The next field's ``(id, type)`` of a struct whose previous field id is ``last``; type 0 is its end."""
        header = self.byte()
        kind, delta = header & 0x0F, header >> 4
        if kind == 0:
            return 0, 0
        return (last + delta if delta else self.zigzag()), kind

    def list_header(self) -> tuple[int, int]:
        header = self.byte()
        size = header >> 4
        return (self.varint() if size == 15 else size), header & 0x0F

    def skip(self, kind: int, depth: int = 0) -> None:
        if depth > 64:
            raise _FooterError("nested too deep")
        if kind in (_TRUE, _FALSE):
            return
        if kind == _BYTE:
            self.byte()
        elif kind in (_I16, _I32, _I64):
            self.varint()
        elif kind == _DOUBLE:
            self.at += 8
        elif kind == _BINARY:
            self.binary()
        elif kind in (_LIST, _SET):
            size, element = self.list_header()
            for _ in range(size):
                if element in (_TRUE, _FALSE):
                    self.byte()  # a boolean in a list is one byte
                else:
                    self.skip(element, depth + 1)
        elif kind == _MAP:
            size = self.varint()
            types = self.byte() if size else 0
            for _ in range(size):
                self.skip(types >> 4, depth + 1)
                self.skip(types & 0x0F, depth + 1)
        elif kind == _STRUCT:
            last = 0
            while True:
                last, field_kind = self.field(last)
                if field_kind == 0:
                    return
                self.skip(field_kind, depth + 1)
        else:
            raise _FooterError(f"unknown compact type {kind}")


def _schema_element(reader: _Reader) -> tuple[str, int]:
    """The name and number of children of one ``SchemaElement`` (its other fields skipped)."""
    name, children, last = None, 0, 0
    while True:
        last, kind = reader.field(last)
        if kind == 0:
            break
        if last == 4 and kind == _BINARY:
            name = reader.binary().decode("utf-8")
        elif last == 5 and kind == _I32:
            children = reader.zigzag()
        else:
            reader.skip(kind)
    if name is None or children < 0:
        raise _FooterError("a schema element without a name")
    return name, children


def _top_level_names(metadata: bytes) -> list[str]:
    """The names of the root's children in the schema of a ``FileMetaData``."""
    reader, last = _Reader(metadata), 0
    while True:
        last, kind = reader.field(last)
        if kind == 0:
            raise _FooterError("no schema")
        if last == 2 and kind == _LIST:
            break
        reader.skip(kind)
    size, element = reader.list_header()
    if element != _STRUCT or size < 1:
        raise _FooterError("an empty schema")
    elements = [_schema_element(reader) for _ in range(size)]
    names, at = [], 1
    for _ in range(elements[0][1]):  # each top-level column, then its subtree (depth first)
        if at >= size:
            raise _FooterError("the schema has fewer elements than its columns")
        names.append(elements[at][0])
        pending = elements[at][1]
        at += 1
        while pending:
            if at >= size:
                raise _FooterError("the schema has fewer elements than its columns")
            pending += elements[at][1] - 1
            at += 1
    return names


def parquet_column_names(path: Path) -> list[str]:
    """The top-level column names ``path``'s Parquet footer states, in order, duplicates kept.

    Raises
    ------
    OSError
        The file cannot be read.
    ValueError
        It is not a Parquet file (or its footer is encrypted, or malformed).
    """
    with path.open("rb") as file:
        file.seek(0, 2)
        size = file.tell()
        if size < 12:
            raise _FooterError("too short for Parquet")
        file.seek(size - 8)
        tail = file.read(8)
        length = int.from_bytes(tail[:4], "little")
        if tail[4:] != _MAGIC or length > size - 12:
            raise _FooterError("no Parquet footer")
        file.seek(size - 8 - length)
        return _top_level_names(file.read(length))
