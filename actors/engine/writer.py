"""What a node's own code hands a run's stream: `get_stream_writer()` (the `custom` mode, as
LangGraph's `langgraph.config.get_stream_writer`) and `emit_message_chunk` (the `messages`
mode's hook for a model adapter that streams tokens)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentlog.actors.engine.context import NodeContext, NotInNodeError, current_context
from agentlog.actors.engine.modes import ModeProjection, StreamMode
from agentlog.projections import Message

StreamWriter = Callable[[Any], None]
"""A node's writer: hands one item to the consumers of the run's `custom` mode."""


class StreamWriterOutsideNodeError(NotInNodeError):
    """`get_stream_writer()` was called where no node of a run is running."""


def get_stream_writer() -> StreamWriter:
    """The writer of the node running here: what it is given, the `custom` stream mode yields.

    Call it inside a node (or code a node calls, in its task or worker thread); the writer
    takes any value and returns at once, or, from a `def` node's worker thread, once the
    value is handed to the stream. With no consumer of the `custom` mode it does nothing.
    What a writer writes is not recorded in the log: it is a view of the run while it runs.
    Outside a node, `StreamWriterOutsideNodeError`.
    """
    try:
        context = current_context()
    except NotInNodeError:
        raise StreamWriterOutsideNodeError(
            "get_stream_writer() was called outside a running node: call it inside a node "
            "function (or code it calls) during invoke/stream"
        ) from None
    stream = context.stream
    projection = None if stream is None else stream.projection
    if stream is None or projection is None or not projection.wants(StreamMode.CUSTOM):
        return _no_one_listens

    def write(value: Any) -> None:
        stream.write(projection.part(StreamMode.CUSTOM, value))

    return write


def _no_one_listens(value: Any) -> None:
    """The writer when no consumer reads the `custom` mode."""


def message_writer() -> StreamWriter | None:
    """The writer of message chunks for the node running here (`emit_message_chunk`'s
    blocking twin, for code in a `def` node's worker thread, such as a chat model's token
    callback); None when no one reads the `messages` mode or no node runs here."""
    try:
        context = current_context()
    except NotInNodeError:
        return None
    stream = context.stream
    projection = None if stream is None else stream.projection
    if stream is None or projection is None or not projection.wants(StreamMode.MESSAGES):
        return None

    def write(chunk: Any) -> None:
        _mark_streamed(projection, chunk)
        stream.write(projection.message_part(chunk, context.node))

    return write


def _mark_streamed(projection: ModeProjection, chunk: Any) -> None:
    """The chunk's message is streamed: not yielded again whole when its step commits."""
    chunk_id = chunk.message_id if isinstance(chunk, Message) else getattr(chunk, "id", None)
    if chunk_id is not None:
        projection.streamed_ids.add(chunk_id)


async def emit_message_chunk(
    chunk: Any, *, context: NodeContext | None = None, **metadata: Any
) -> None:
    """Hand a message chunk (a token delta, in whatever message type the caller speaks: a
    LangChain `AIMessageChunk` as is) to the consumers of the `messages` mode, with the
    node's metadata (`langgraph_node`, `langgraph_step`, ...) and `metadata` added. The
    chunk's id (a `Message`'s `message_id`, else its `id`) marks that message as streamed.

    The hook for a model adapter that streams tokens itself: agentlog's own model nodes
    publish their deltas as `StreamChunk`s (`NodeContext.publish`), which the stream turns
    into the same parts. A chunk is not recorded: the log gets the whole message when the
    node's step commits, and that message is not yielded again when its model call records
    `streamed=True` (`ModelCalled`). Nothing happens when no one reads the `messages` mode.
    """
    context = context if context is not None else current_context()
    stream = context.stream
    projection = None if stream is None else stream.projection
    if stream is None or projection is None or not projection.wants(StreamMode.MESSAGES):
        return
    _mark_streamed(projection, chunk)
    await stream.tell(projection.message_part(chunk, context.node, **metadata))
