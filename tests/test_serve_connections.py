"""Slow clients against a real `agentlog serve` process on 127.0.0.1, with real sockets: a
connection trickling its headers or its body a byte at a time is cut off at its deadline (the
body's with 408 `body_timeout`), a client address past its connection cap has the new ones
closed at once, and the server's descriptors (/proc/<pid>/fd) come back to where they were."""

from __future__ import annotations

import os
import select
import signal
import socket
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.test_cli_serve import start

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="counts descriptors in /proc"
)

HEADER_S = 0.5
LIMITS = (
    "--header-timeout",
    str(HEADER_S),
    "--body-timeout",
    "0.5",
    "--allowed-host",
    "agents.example",
)
CLIENTS = 60
GUARD_S = 60.0
"""A failure guard only: the server is expected to close everything within a few seconds."""


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_slow_clients_are_cut_off_and_their_descriptors_freed(tmp_path: Path) -> None:
    proc, url = start(tmp_path / "slow.db", *LIMITS)
    try:
        where = urlsplit(url)
        address = (where.hostname or "127.0.0.1", where.port or 80)
        with httpx.Client(base_url=url, timeout=30) as client:
            assert client.get("/ok").status_code == 200
            assert client.get("/ok", headers={"Host": "agents.example"}).status_code == 200
            rebound = client.get("/ok", headers={"Host": "evil.example"})
            assert rebound.status_code == 400, rebound.text  # --allowed-host, and no other
        baseline = descriptors(proc.pid)
        sockets: list[socket.socket] = []
        late: set[socket.socket] = set()  # whose headers this process sent past their deadline
        for i in range(CLIENTS):
            opened = time.monotonic()
            sock = socket.create_connection(address, timeout=10)
            head = b"GET /ok HTTP/1.1\r\nHost: 127.0.0.1\r\n"  # headers never finished
            if i % 2:
                head = (
                    b"POST /threads/search HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
                )  # a body that never ends
            sock.sendall(head)
            if time.monotonic() - opened >= HEADER_S:  # the server's deadline began after `opened`
                late.add(sock)  # a loaded machine held this process: the server may cut it first
            sock.setblocking(False)
            sockets.append(sock)
        peak = descriptors(proc.pid)
        answers: dict[socket.socket, bytes] = {s: b"" for s in sockets}
        still = set(sockets)
        started = time.monotonic()
        while still and time.monotonic() - started < GUARD_S:
            # wakes as soon as the server answers or closes; else a tick of the trickle
            readable, _, _ = select.select(list(still), [], [], 0.2)
            for sock in readable:
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                answers[sock] += data
                if not data:
                    still.discard(sock)
            for sock in still - set(readable):
                try:
                    sock.send(b"a")  # one more byte: the connection is not idle
                except OSError:
                    still.discard(sock)
            peak = max(peak, descriptors(proc.pid))
        held = time.monotonic() - started
        assert not still, f"{len(still)} slow connections still open after {held:.1f} s"
        # each body that never ends is answered 408, unless its headers came too late (cut)
        for sock in sockets[1::2]:
            answer = answers[sock]
            if not (sock in late and answer == b""):
                assert answer.startswith(b"HTTP/1.1 408") and b"body_timeout" in answer, answer
        assert len(late) < CLIENTS // 2, "every request was sent late: nothing was tested"
        assert not any(a.startswith(b"HTTP/1.1 200") for a in answers.values())
        for sock in sockets:
            sock.close()
        while descriptors(proc.pid) > baseline and time.monotonic() - started < GUARD_S:
            select.select([], [], [], 0.05)  # the server's side closes on its loop
        after = descriptors(proc.pid)
        assert after <= baseline, (baseline, peak, after)
        with httpx.Client(base_url=url, timeout=30) as client:
            assert client.get("/ok").status_code == 200  # it still serves
        print(f"descriptors: before {baseline}, peak {peak}, after {after}; closed in {held:.2f} s")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


def test_a_client_past_its_connection_cap_has_the_new_ones_closed(tmp_path: Path) -> None:
    proc, url = start(tmp_path / "cap.db", "--client-connections", "5", "--header-timeout", "60")
    try:
        where = urlsplit(url)
        address = (where.hostname or "127.0.0.1", where.port or 80)
        held = [socket.create_connection(address, timeout=10) for _ in range(5)]
        extra = [socket.create_connection(address, timeout=10) for _ in range(5)]
        started = time.monotonic()
        closed: set[socket.socket] = set()
        while len(closed) < len(extra) and time.monotonic() - started < GUARD_S:
            readable, _, _ = select.select([s for s in extra if s not in closed], [], [], 1)
            for sock in readable:
                try:
                    data = sock.recv(1024)
                except OSError:
                    data = b""
                assert data == b"", data  # closed, never answered
                closed.add(sock)
        assert len(closed) == len(extra), "a connection past the cap was kept"
        readable, _, _ = select.select(held, [], [], 0)
        assert readable == []  # the first five are still open, waiting for their requests
        for sock in held:
            sock.close()
        for sock in extra:
            sock.close()
        with httpx.Client(base_url=url, timeout=30) as client:
            while True:  # its slots come back as the server sees the five go
                try:
                    assert client.get("/ok").status_code == 200
                    break
                except httpx.TransportError:
                    assert time.monotonic() - started < GUARD_S, "the cap never came back"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
