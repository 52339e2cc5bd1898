"""The worker's end of descriptor 3: JSON lines to the parent and its answers, tensors copied
into sealed memory files sent beside them (``TensorParcel``; the parent's ``outputs``)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from .protocol import ALIGN, CHANNEL_FD, MOST_FILES

# Bound when the worker starts, before any candidate code runs: later patches of the modules
# do not reach these.
perf_counter = time.perf_counter
_write = os.write
_read = os.read
_pwrite = os.pwrite
_memfd = os.memfd_create
_dumps = json.dumps
_loads = json.loads
_LINE_BYTES = 1 << 20


class Failure(Exception):
    def __init__(self, stage: str, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.stage = stage
        self.message = message
        self.detail = detail


class Channel:
    """This process's end of descriptor 3: JSON lines to the parent and its answers."""

    def __init__(self) -> None:
        import socket

        self.pending = b""
        # A descriptor of its own for the socket object, which closes it when collected.
        try:
            self.socket = socket.socket(fileno=os.dup(CHANNEL_FD))
        except OSError as error:
            raise self._broken(str(error)) from None

    def send(self, message: dict[str, Any], fds: tuple[int, ...] | list[int] = ()) -> None:
        """One message; ``fds`` (memory files, ``TensorParcel``) go with its first byte."""
        import array
        import socket

        data = (_dumps(message) + "\n").encode()
        if fds:
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
            try:
                sent = self.socket.sendmsg([data], rights)
            except OSError as error:
                raise self._broken(str(error)) from None
            data = data[sent:]
        self._write_all(data)

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        self.send(message)
        return self.receive()

    def receive(self) -> dict[str, Any]:
        while b"\n" not in self.pending:
            try:
                chunk = _read(CHANNEL_FD, 1 << 16)
            except OSError as error:
                raise self._broken(str(error)) from None
            if not chunk or len(self.pending) > _LINE_BYTES:
                raise self._broken("closed by the parent")
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        answer = _loads(line)
        if not isinstance(answer, dict) or "refused" in answer:
            raise self._broken(str(answer.get("refused") if isinstance(answer, dict) else line))
        return answer

    def _write_all(self, data: Any) -> None:
        view = memoryview(data).cast("B")
        while len(view):
            try:
                written = _write(CHANNEL_FD, view)
            except OSError as error:
                raise self._broken(str(error)) from None
            view = view[written:]

    @staticmethod
    def _broken(why: str) -> Failure:
        return Failure("channel_error", f"the harness's channel (descriptor 3) failed: {why}")


class TensorParcel:
    """Tensors copied into sealed memory files of ``segment_bytes`` and sent in one message,
    each at an offset aligned to ``ALIGN`` (one larger than a segment's rest starts a fresh
    one); written as added, so the caller can drop it."""

    def __init__(self, torch: Any, staging: Any, segment_bytes: int) -> None:
        self.torch, self.staging, self.segment = torch, staging, segment_bytes
        self.fds: list[int] = []
        self.used: list[int] = []

    def add(self, values: list[Any]) -> list[dict[str, Any]]:
        torch = self.torch
        headers = []
        for value in values:
            data = value.detach()
            if not data.is_contiguous():
                data = data.contiguous()
            size = int(data.numel() * data.element_size())
            at = self._place(size)
            headers.append(
                {
                    "dtype": str(data.dtype).removeprefix("torch."),
                    "shape": list(data.shape),
                    "nbytes": size,
                    "at": at,
                }
            )
            if size:
                self._write(data.reshape(-1).view(torch.uint8), at, size)
        return headers

    def _place(self, size: int) -> int:
        if size == 0:
            return 0
        segment = self.segment
        start = -(-self.used[-1] // ALIGN) * ALIGN if self.used else segment
        if size <= segment - start:
            self.used[-1] = start + size
            return (len(self.used) - 1) * segment + start
        at = len(self.used) * segment
        whole, rest = divmod(size, segment)
        self.used += [segment] * whole + ([rest] if rest else [])
        if len(self.used) > MOST_FILES:
            raise Failure(
                "runtime_error",
                f"outputs of {sum(self.used) / 1e9:.1f} GB in one message: more than "
                f"{MOST_FILES} memory files of {segment >> 20} MiB, all the harness passes "
                "at once",
            )
        return at

    def _write(self, raw: Any, at: int, size: int) -> None:
        done = 0
        while done < size:
            segment, offset = divmod(at + done, self.segment)
            piece = min(size - done, self.segment - offset)
            while len(self.fds) <= segment:
                self.fds.append(_memfd("maxcode-output", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING))
            fd = self.fds[segment]
            if self.staging is None:
                _pwrite_all(fd, raw[done : done + piece].numpy(), offset)
            else:  # a device's tensor, through pinned host memory
                step = self.staging.numel()
                for part in range(0, piece, step):
                    count = min(step, piece - part)
                    self.staging[:count].copy_(raw[done + part : done + part + count])
                    _pwrite_all(fd, self.staging[:count].numpy(), offset + part)
            done += piece

    def send(self, channel: Channel, message: dict[str, Any]) -> None:
        """Seals the files (no write, shrink or growth, by anyone, ever) and sends them with
        ``message``."""
        import fcntl

        seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        try:
            for fd, used in zip(self.fds, self.used):
                os.ftruncate(fd, used)
                _seal(fd, seals)
            channel.send({**message, "files": len(self.fds)}, self.fds)
        finally:
            for fd in self.fds:
                os.close(fd)
            self.fds = []


def _seal(fd: int, seals: int) -> None:
    """Add ``seals`` to ``fd``. The kernel refuses a write seal (EBUSY) while any of the file's
    pages is pinned, which compaction or migration does for a moment under memory pressure:
    tried again for up to a second before the error stands."""
    import errno
    import fcntl
    import time

    for _ in range(100):
        try:
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
            return
        except OSError as error:
            if error.errno != errno.EBUSY:
                raise
            time.sleep(0.01)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)


_STAGING_BYTES = 64 << 20


def _pwrite_all(fd: int, data: Any, offset: int) -> None:
    view = memoryview(data).cast("B")
    while len(view):
        written = _pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def staging(torch: Any, device: Any) -> Any:
    """Pinned host memory that a device's outputs pass through (None on a CPU)."""
    if device.type != "cuda":
        return None
    return torch.empty(_STAGING_BYTES, dtype=torch.uint8, pin_memory=True)
