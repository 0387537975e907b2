"""The frames of the owner <-> worker pipes, used on both sides (no ``memory_core`` imports).

A worker has one request pipe (owner -> worker) and ``pipeline_depth`` reply
channels (worker -> owner). Every message is a frame: an 8-byte big-endian length, a channel
byte, then a pickle (standard library):

- owner -> worker ``("task", task_id, task_name, payload)`` with the channel of its reply: exactly
  one reply frame on that channel, ``(task_id, True, value)`` or
  ``(task_id, False, error)`` where ``error`` is ``MemoryCoreError.to_data()``'s
  ``{"code", "message", "type"}``;
- owner -> worker ``("ctl", name, payload)`` (channel ``NO_REPLY``): a control message (e.g. drop
  derived state), no reply;
- owner -> worker ``("exit",)`` (channel ``NO_REPLY``): leave the loop.

The owner reads a channel that holds at most one frame at a time (a channel carries the reply of
one task until it is read), so :func:`read_frame` needs no buffer; the worker's request pipe can
hold several frames (pipelined tasks, control messages) and is read through :class:`FrameReader`.
"""

from __future__ import annotations

import os
import struct

FRAME_HEADER = struct.Struct("!QB")
NO_REPLY = 255
_SMALL_FRAME = 1 << 16
_HEADER_SIZE = FRAME_HEADER.size
_pack_header = FRAME_HEADER.pack
_unpack_header = FRAME_HEADER.unpack_from


def write_frame(fd: int, data: bytes, channel: int = 0) -> None:
    """Write one frame (blocking); small frames go out in one ``write``."""
    size = len(data)
    header = _pack_header(size, channel)
    if size <= _SMALL_FRAME:
        frame = header + data
        n = os.write(fd, frame)
        if n < size + _HEADER_SIZE:
            _write_all(fd, memoryview(frame)[n:])
    else:
        _write_all(fd, memoryview(header))
        _write_all(fd, memoryview(data))


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        view = view[os.write(fd, view):]


def read_frame(fd: int) -> bytes | memoryview | None:
    """The payload of the one frame on a reply channel; None at end of file (the worker exited)
    or when the channel was closed."""
    try:
        buf = os.read(fd, _SMALL_FRAME + _HEADER_SIZE)
        n = len(buf)
        # the common case first: the whole frame came in one read (a copy costs less than a view)
        if n >= _HEADER_SIZE and n == _HEADER_SIZE + _unpack_header(buf)[0]:
            return buf[_HEADER_SIZE:]
        if not buf:
            return None
        while len(buf) < _HEADER_SIZE:
            more = os.read(fd, _SMALL_FRAME)
            if not more:
                return None
            buf += more
        total = _HEADER_SIZE + _unpack_header(buf)[0]
        if len(buf) == total:
            return buf[_HEADER_SIZE:]
        parts = bytearray(buf)
        while len(parts) < total:
            more = os.read(fd, min(total - len(parts), 1 << 22))
            if not more:
                return None
            parts += more
        return memoryview(parts)[_HEADER_SIZE:]
    except OSError:
        return None


class FrameReader:
    """Frames from a pipe that may hold several (the worker's request pipe)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = bytearray()

    def next(self) -> tuple[int, bytes] | None:
        """``(channel, payload)`` of the next frame; None at end of file."""
        buf = self.buf
        while len(buf) < FRAME_HEADER.size:
            if not self._fill(_SMALL_FRAME):
                return None
        size, channel = FRAME_HEADER.unpack_from(buf)
        total = FRAME_HEADER.size + size
        while len(buf) < total:
            if not self._fill(max(_SMALL_FRAME, total - len(buf))):
                return None
        data = bytes(buf[FRAME_HEADER.size:total])
        del buf[:total]
        return channel, data

    def _fill(self, n: int) -> bool:
        try:
            more = os.read(self.fd, n)
        except OSError:
            return False
        self.buf += more
        return bool(more)
