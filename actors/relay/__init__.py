"""The log as the outbox: relay committed records to Redis Streams, NATS JetStream or
RabbitMQ, effectively once, across crashes of the relay and outages of the broker; and the
consumer's side, which drops second copies and verifies each thread's chain.

    async with Relay(store, "nats://127.0.0.1:4222", name="to-nats"):
        ...  # the runtime runs; every record it commits reaches the stream

`agentlog relay --db FILE --to URL --name NAME` runs the same from the command line, and
`agentlog relay status --db FILE` shows each relay's cursor and lag.
"""

from agentlog.actors.relay.brokers import DEFAULT_TEMPLATES
from agentlog.actors.relay.consume import (
    ChainCheck,
    ChainError,
    amqp_records,
    nats_records,
    redis_records,
)
from agentlog.actors.relay.message import (
    BrokerRefusedError,
    Message,
    RelayConfigError,
    RelayError,
)
from agentlog.actors.relay.relay import Relay, RelayStatus, relay

__all__ = [
    "DEFAULT_TEMPLATES",
    "BrokerRefusedError",
    "ChainCheck",
    "ChainError",
    "Message",
    "Relay",
    "RelayConfigError",
    "RelayError",
    "RelayStatus",
    "amqp_records",
    "nats_records",
    "redis_records",
    "relay",
]
