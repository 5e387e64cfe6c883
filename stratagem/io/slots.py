"""A file store's slots: data rewritten in place as work goes on (an llm step's checkpoint), read
back whole, the latest write or the one before it, never a part of either.

A slot is two files that take turns, `<name>.0` and `<name>.1`. Each write goes to the file that
does not hold the latest whole write, rewriting it in place behind a header that numbers the write
and checks its bytes (`slot <n> <length> <crc32>`); a reader takes the whole write with the highest
number. A write cut short (a process killed during it) spoils only the file it was writing, and
the reader takes the other. Rewriting a file in place costs a twentieth of writing a new file and
renaming it over the old (0.02 against 0.4 ms on ext4, whatever the size), which a step that saves
twice a round would otherwise pay every round. Nothing here is synced to disk: a process killed
loses nothing written, a machine that loses power may (as for every file the store writes).

One process writes a slot at a time (Temporal runs one attempt of an activity at a time); another
may write it later (the next attempt, on another worker), which the next write here notices.
"""

from __future__ import annotations

import os
import re
import zlib
from pathlib import Path

_HEADER = re.compile(rb"slot (\d+) (\d+) ([0-9a-f]{8})\n")
_HEADER_BYTES = 64


def files(path: Path) -> tuple[Path, Path]:
    return path.with_name(path.name + ".0"), path.with_name(path.name + ".1")


_Signature = tuple[int, int, int]  # a file's inode, size and modification time


class Slots:
    """Writes slots, remembering its own last write of each: while neither of a slot's files has
    changed since (another worker wrote it: the next attempt), that write is the latest and whole,
    and nothing need be read to know where the next goes."""

    MEMORY = 1024  # slots remembered; more and the memory starts again (it only saves reads)

    def __init__(self) -> None:
        self._mine: dict[Path, tuple[int, int, tuple[_Signature | None, _Signature | None]]] = {}

    def write(self, path: Path, data: bytes) -> None:
        """Write `data` to the slot at `path`. Raises OSError."""
        pair = files(path)
        seen = (_signature(pair[0]), _signature(pair[1]))
        mine = self._mine.get(path)
        if mine is not None and mine[2] == seen:
            target, number = 1 - mine[0], mine[1] + 1
        else:
            numbers = [_number(f) for f in pair]
            newest = 0 if numbers[0] >= numbers[1] else 1
            torn = numbers[newest] >= 0 and read(pair[newest]) is None
            # A latest write that is not whole is written over: the other file holds the one before it.
            target, number = newest if torn else 1 - newest, max(numbers) + 1
        body = b"slot %d %d %08x\n" % (number, len(data), zlib.crc32(data)) + data
        self._mine.pop(path, None)
        try:
            fd = os.open(pair[target], os.O_WRONLY | os.O_CREAT, 0o644)
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)  # the first write (mkdir costs more than the write)
            fd = os.open(pair[target], os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            view, done = memoryview(body), 0
            while done < len(body):
                done += os.pwrite(fd, view[done:], done)
            os.ftruncate(fd, len(body))
            written = os.fstat(fd)
        finally:
            os.close(fd)
        signatures = list(seen)
        signatures[target] = (written.st_ino, written.st_size, written.st_mtime_ns)
        if len(self._mine) >= self.MEMORY:
            self._mine.clear()
        self._mine[path] = (target, number, (signatures[0], signatures[1]))


def read(file: Path) -> bytes | None:
    """The data of one of a slot's files, or None if it holds no whole write."""
    try:
        body = file.read_bytes()
    except FileNotFoundError:
        return None
    header = _HEADER.match(body, 0, _HEADER_BYTES)
    if header is None:
        return None
    data = body[header.end() : header.end() + int(header[2])]
    return data if len(data) == int(header[2]) and zlib.crc32(data) == int(header[3], 16) else None


def latest(path: Path) -> bytes | None:
    """The slot's latest whole write; None if it has none (no slot there, or none whole)."""
    pair = sorted(files(path), key=_number, reverse=True)
    for file in pair:
        if _number(file) >= 0:
            data = read(file)
            if data is not None:
                return data
    return None


def exists(path: Path) -> bool:
    return any(f.exists() for f in files(path))


def _signature(file: Path) -> _Signature | None:
    try:
        stat = os.stat(file)
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def _number(file: Path) -> int:
    """The number in the file's header (-1: no file, or no header)."""
    try:
        with file.open("rb") as handle:
            header = _HEADER.match(handle.read(_HEADER_BYTES))
    except FileNotFoundError:
        return -1
    return int(header[1]) if header else -1
