"""Check that the brokers the relay's tests use answer, each in its own protocol.

    python3 tools/check_brokers.py     # exit 0 when Redis, NATS (JetStream) and RabbitMQ answer

`.ci/run` runs it before the suite, so a missing broker fails the run loudly, naming which,
instead of the relay's tests failing one by one. The standard library alone: it runs before
anything is installed.
"""

from __future__ import annotations

import json
import socket
import sys

HOST = "127.0.0.1"


def _talk(port: int, send: bytes, size: int = 4096) -> bytes:
    with socket.create_connection((HOST, port), timeout=5) as conn:
        if send:
            conn.sendall(send)
        return conn.recv(size)


def redis() -> str | None:
    reply = _talk(6379, b"PING\r\n")
    return None if reply.startswith(b"+PONG") else f"PING answered {reply[:40]!r}"


def nats() -> str | None:
    reply = _talk(4222, b"")
    if not reply.startswith(b"INFO "):
        return f"no INFO line: {reply[:40]!r}"
    info = json.loads(reply[5:].split(b"\r\n", 1)[0])
    return None if info.get("jetstream") else "JetStream is off (start nats-server with -js)"


def rabbitmq() -> str | None:
    reply = _talk(5672, b"AMQP\x00\x00\x09\x01")
    return None if reply[:1] == b"\x01" else f"no AMQP 0-9-1 greeting: {reply[:16]!r}"


def main() -> int:
    failed = []
    for name, port, check in (("Redis", 6379, redis), ("NATS", 4222, nats),
                              ("RabbitMQ", 5672, rabbitmq)):  # fmt: skip
        try:
            problem = check()
        except OSError as exc:
            problem = f"nothing answers ({exc})"
        if problem:
            failed.append(f"{name} on {HOST}:{port}: {problem}")
    for line in failed:
        print(f"BROKER MISSING: {line}", file=sys.stderr)
    if failed:
        print("the relay's tests need these brokers running: start them first", file=sys.stderr)
        return 1
    print("brokers answer: Redis, NATS (JetStream), RabbitMQ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
