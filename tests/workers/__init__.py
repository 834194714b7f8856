"""Worker programs the reliability tests run (and kill) as real processes."""

from __future__ import annotations

import os


def append_line(path: str, line: str, *, durable: bool = True) -> None:
    """Append one line in one write: a side effect a test can count, surviving a SIGKILL."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
