"""The three brokers a relay sends to, each through its official client (an optional extra).

A sink connects, sends a batch of messages in order and returns once the broker confirmed
every one of them (or raises), and closes. It never reconnects by itself: on any failure
the relay closes it and opens a fresh one, so what one connection carried is always a
prefix of what was sent on it (TCP keeps order), and the relay sends again from the first
message not confirmed. What each broker then does with a second copy:

- Redis: a Lua script (the batch in one MessagePack argument) adds each record to its
  stream with the entry id `POSITION-0` and stops at the first refusal, so a stream only
  ever holds a prefix of what the relay sent, in order. A record already there is refused
  as "equal or smaller than the top item"; the script then checks that the entry at that
  id carries the record's id (else the stream holds entries the relay did not write:
  `BrokerRefusedError`). Exactly once in the stream.
- NATS JetStream: each message carries `Nats-Msg-Id` (the record's hash); the stream drops a
  second copy that arrives within its duplicate window (`duplicate_window`, 2 minutes unless
  the URL says otherwise). A copy sent after the window is stored again: the consumer helper
  drops it by (thread, seq).
- RabbitMQ: publisher confirms on a durable, persistent route with `mandatory` set (a
  message no queue takes is an error, not a silent drop); AMQP has no deduplication, so a
  redelivery after a crash is queued again with the same `message_id`, and the consumer
  helper drops it by (thread, seq).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import itertools
import re
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import msgspec

from agentlog.actors.relay.message import (
    BrokerRefusedError,
    Message,
    RelayConfigError,
    Template,
)

__all__ = [
    "DEFAULT_TEMPLATES",
    "Sink",
    "broker_of",
    "client_module",
    "open_sink",
    "shown_url",
    "split_url",
]

DEFAULT_TEMPLATES = {"redis": "agentlog", "nats": "agentlog.{kind}", "amqp": "agentlog.{kind}"}
"""Where records go unless `--subject-template` says: one Redis stream for the whole log
(commit order across threads), one NATS subject and AMQP routing key per kind."""

CONFIRM_TIMEOUT = 30.0
"""Seconds a batch may wait for the broker's confirmations before the relay reconnects."""

_SCHEMES = {"redis": "redis", "rediss": "redis", "nats": "nats", "tls": "nats",
            "amqp": "amqp", "amqps": "amqp"}  # fmt: skip
_EXTRA = {"redis": ("redis", "redis"), "nats": ("nats", "nats"), "amqp": ("aio_pika", "amqp")}
_PASSWORD = re.compile(r"(//[^:/@]*):[^@/]*@")


class Sink(Protocol):
    broker: str
    url: str

    async def connect(self) -> None: ...

    async def send(self, messages: list[Message]) -> int:
        """Send in order; return once all are confirmed: how many were copies it dropped."""
        ...

    async def close(self) -> None: ...


def shown_url(url: str) -> str:
    """The URL as messages show it: without its password."""
    return _PASSWORD.sub(r"\1:***@", url, count=1)


def broker_of(url: str) -> str:
    """'redis', 'nats' or 'amqp' for a broker URL, else `RelayConfigError`."""
    scheme = urlsplit(url).scheme if isinstance(url, str) else ""
    if scheme not in _SCHEMES:
        raise RelayConfigError(
            f"--to {shown_url(str(url))!r} names no broker this relay knows: give a "
            "redis://HOST:6379, nats://HOST:4222 or amqp://USER:PASSWORD@HOST:5672/ URL"
        )
    return _SCHEMES[scheme]


def client_module(broker: str) -> Any:
    module, extra = _EXTRA[broker]
    try:
        return importlib.import_module(module)
    except ImportError:
        raise RelayConfigError(
            f"relaying to {broker} needs its client: pip install 'agentlog[{extra}]'"
        ) from None


def split_url(url: str, ours: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The URL without the query parameters the relay reads (`ours`, with defaults), and
    their values; an unknown one is refused."""
    parts = urlsplit(url)
    found, rest = dict(ours), []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in ours:
            found[key] = value
        else:
            rest.append((key, value))
    return urlunsplit(parts._replace(query=urlencode(rest))), found


def open_sink(url: str, template: Template) -> Sink:
    """The sink for `url` (not yet connected); its client is imported now."""
    broker = broker_of(url)
    client = client_module(broker)
    if broker == "redis":
        return RedisSink(url, template, client)
    if broker == "nats":
        return NatsSink(url, template, client)
    return AmqpSink(url, template, client)


# ---- Redis Streams ------------------------------------------------------------------------

_XADD_ALL = """
local batch, added, copies = cmsgpack.unpack(ARGV[1]), 0, 0
for _, m in ipairs(batch) do
  local key, id, mid = KEYS[m[1]], m[2], m[3]
  local done = redis.pcall('XADD', key, id, unpack(m[4]))
  if type(done) == 'table' and done.err then
    if not string.find(done.err, 'equal or smaller', 1, true) then
      return {added, copies, done.err}
    end
    local there = redis.call('XRANGE', key, id, id)
    if #there ~= 1 or there[1][2][2] ~= mid then
      return {added, copies, 'FOREIGN ' .. key .. ' ' .. id}
    end
    copies = copies + 1
  else
    added = added + 1
  end
end
return {added, copies}
"""


class RedisSink:
    broker = "redis"

    def __init__(self, url: str, template: Template, client: Any) -> None:
        self.url, self.template, self.redis = url, template, client
        self.conn: Any = None

    async def connect(self) -> None:
        conn = self.redis.asyncio.Redis.from_url(
            self.url, socket_timeout=CONFIRM_TIMEOUT, socket_connect_timeout=5, retry=None
        )
        try:
            await conn.ping()
        except BaseException:
            await conn.aclose()
            raise
        self.conn, self.script = conn, conn.register_script(_XADD_ALL)

    async def send(self, messages: list[Message]) -> int:
        keys = list(dict.fromkeys(m.destination for m in messages))
        slot = {key: i for i, key in enumerate(keys, start=1)}
        batch = [
            [slot[m.destination], f"{m.position}-0", m.id,
             ["id", m.id, "record", m.body.decode(), *itertools.chain(*m.headers.items())]]
            for m in messages
        ]  # fmt: skip
        reply = await self.script(keys=keys, args=[msgspec.msgpack.encode(batch)])
        if len(reply) > 2:
            problem = reply[2].decode() if isinstance(reply[2], bytes) else str(reply[2])
            if problem.startswith("FOREIGN"):
                _, key, entry = problem.split(" ", 2)
                raise BrokerRefusedError(
                    f"Redis stream {key!r} holds entries past {entry} that this relay did "
                    "not write (another writer, or a trim): give the relay a stream of its "
                    "own (--subject-template), or reset its cursor"
                )
            if problem.startswith("WRONGTYPE"):
                raise BrokerRefusedError(
                    f"a Redis key the template names is not a stream ({problem}): pick "
                    "another --subject-template"
                )
            raise ConnectionError(f"Redis refused an XADD for now: {problem}")
        return int(reply[1])

    async def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.aclose()


# ---- NATS JetStream -----------------------------------------------------------------------


class NatsSink:
    broker = "nats"

    def __init__(self, url: str, template: Template, client: Any) -> None:
        self.url, found = split_url(url, {"stream": "AGENTLOG", "duplicate_window": "120"})
        self.template, self.nats = template, client
        self.stream = found["stream"]
        try:
            self.window = float(found["duplicate_window"])
        except ValueError:
            self.window = -1.0
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", self.stream) or not self.window > 0:
            raise RelayConfigError(
                f"{shown_url(url)!r}: ?stream= is a JetStream stream name (letters, digits, "
                "'_', '-') and ?duplicate_window= a number of seconds > 0"
            )
        self.conn: Any = None

    async def connect(self) -> None:
        self.broken = asyncio.Event()

        async def broke(*_: Any) -> None:
            self.broken.set()

        conn = await self.nats.connect(
            servers=[self.url], allow_reconnect=False, connect_timeout=5,
            error_cb=broke, disconnected_cb=broke, closed_cb=broke,
        )  # fmt: skip
        try:
            self.js = conn.jetstream(timeout=CONFIRM_TIMEOUT)
            try:
                await self.js.stream_info(self.stream)
            except self.nats.js.errors.NotFoundError:
                await self.js.add_stream(
                    name=self.stream,
                    subjects=[self.template.wildcard()],
                    duplicate_window=self.window,
                )
        except BaseException:
            await conn.close()
            raise
        self.conn = conn

    async def send(self, messages: list[Message]) -> int:
        limit = self.conn.max_payload
        acks = []
        for m in messages:
            headers = {"Nats-Msg-Id": m.id}
            headers.update((f"Agentlog-{k.capitalize()}", v) for k, v in m.headers.items())
            if len(m.body) + sum(len(k) + len(v) + 4 for k, v in headers.items()) > limit:
                raise BrokerRefusedError(
                    f"the record at position {m.position} is {len(m.body)} bytes, more than "
                    f"the NATS server's max_payload ({limit}): raise it in the server's "
                    "configuration"
                )
            future = await self.js.publish_async(
                m.destination, m.body, headers=headers, stream=self.stream
            )
            acks.append(future)
        done = asyncio.ensure_future(asyncio.gather(*acks))
        broken = asyncio.ensure_future(self.broken.wait())
        try:
            await asyncio.wait({done, broken}, timeout=CONFIRM_TIMEOUT,
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        finally:
            broken.cancel()
        if not done.done():
            done.cancel()
            for ack in acks:
                ack.cancel()
            raise ConnectionError("the NATS connection broke before every publish was acked")
        api_error = self.nats.js.errors.APIError
        try:
            results = done.result()
        except api_error as exc:
            if getattr(exc, "err_code", None) == 10060:  # the subject is another stream's
                raise BrokerRefusedError(
                    f"a subject of the template is bound to another JetStream stream than "
                    f"{self.stream!r} ({exc}): pick another --subject-template or ?stream="
                ) from None
            raise
        return sum(1 for ack in results if ack.duplicate)

    async def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), 5)


# ---- RabbitMQ -----------------------------------------------------------------------------


class AmqpSink:
    broker = "amqp"

    def __init__(self, url: str, template: Template, client: Any) -> None:
        self.url, found = split_url(url, {"exchange": "agentlog", "queue": "agentlog"})
        self.template, self.pika = template, client
        self.exchange_name, self.queue = found["exchange"], found["queue"]
        self.conn: Any = None

    async def connect(self) -> None:
        conn = await self.pika.connect(self.url, timeout=5)
        try:
            channel = await conn.channel(publisher_confirms=True, on_return_raises=True)
            self.exchange = await channel.declare_exchange(
                self.exchange_name, self.pika.ExchangeType.TOPIC, durable=True
            )
            if self.queue:  # a queue that takes everything, so nothing is sent to no one
                queue = await channel.declare_queue(self.queue, durable=True)
                await queue.bind(self.exchange, "#")
        except BaseException:
            await conn.close()
            raise
        self.conn = conn

    async def send(self, messages: list[Message]) -> int:
        persistent = self.pika.DeliveryMode.PERSISTENT
        sends = [
            asyncio.ensure_future(
                self.exchange.publish(
                    self.pika.Message(
                        m.body, message_id=m.id, headers=dict(m.headers), delivery_mode=persistent,
                        content_type="application/json", type=m.headers["kind"],
                    ),
                    routing_key=m.destination, mandatory=True, timeout=CONFIRM_TIMEOUT,
                )
            )
            for m in messages
        ]  # fmt: skip
        results = await asyncio.gather(*sends, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
            if type(result).__name__ != "Ack":
                raise ConnectionError(f"RabbitMQ did not confirm a message: {result!r}")
        return 0

    async def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), 5)
