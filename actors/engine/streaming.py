"""`CompiledGraph`'s streams: agentlog's own `StreamChunk`s, or LangGraph's stream modes
(`agentlog.actors.engine.modes`) projected from the same run's commits."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentlog.actors.engine.modes import (
    InvalidStreamModeError,
    ModeProjection,
    StreamMode,
    check_modes,
    check_version,
    shaped,
)
from agentlog.actors.engine.options import Durability
from agentlog.actors.engine.run import check_tracing, run_config
from agentlog.actors.engine.stream import END_OF_STREAM, RunStream

if TYPE_CHECKING:
    from agentlog.actors.engine.graph import StateGraph
    from agentlog.actors.engine.loop import RunLoop
    from agentlog.actors.engine.portal import Portal


class Streaming:
    """`astream` and `stream`, for `CompiledGraph`: each call runs the graph on a run
    stream of its own and yields what the stream delivers."""

    if TYPE_CHECKING:

        @property
        def graph(self) -> StateGraph[Any]: ...

        async def _run(
            self, input: Any, config: Mapping[str, Any] | None, stream: RunStream | None
        ) -> RunLoop[Any]: ...

        def _get_portal(self) -> Portal: ...

        def _iterating(self, parts: AsyncGenerator[Any, None]) -> Iterator[Any]: ...

        def call_config(
            self, config: Mapping[str, Any] | None, context: Any, durability: str | None
        ) -> dict[str, Any] | None: ...

    def astream(
        self,
        input: Any = None,
        config: Mapping[str, Any] | None = None,
        *,
        stream_mode: str | Sequence[str] | None = None,
        subgraphs: bool = False,
        version: str = "v1",
        context: Any = None,
        durability: Durability | None = None,
    ) -> AsyncIterator[Any]:
        """Run like `ainvoke`, yielding what the run does as it commits.

        Without `stream_mode`: agentlog's own stream of `StreamChunk`s (message, update and
        state chunks). With it: LangGraph's stream modes (`values`, `updates`, `messages`,
        `custom`, `tasks`, `checkpoints`, `debug`, or a list of them; see
        `agentlog.actors.engine.modes`), in LangGraph's shapes: the chunk for one mode, a
        `(mode, chunk)` tuple for a list, the namespace first with `subgraphs=True`, or
        `{"type", "ns", "data"}` dicts with `version="v2"`. A mode or version that does not
        exist raises `InvalidStreamModeError` here, before the run starts.

        A consumer that stops reading early abandons the run: it is recorded as stopped, and
        `ainvoke(None, config)` resumes it. `context` and `durability` are `ainvoke`'s.
        """
        check_version(version)
        config = self.call_config(config, context, durability)
        if stream_mode is None:
            if version != "v1" or subgraphs:
                raise InvalidStreamModeError(
                    "version= and subgraphs= shape LangGraph's stream modes: give stream_mode= "
                    "(say 'values') as well, or leave them out for agentlog's StreamChunks"
                )
            return self._streamed(input, config, None)
        modes = check_modes(stream_mode)
        several = not isinstance(stream_mode, str)
        return self._parts(input, config, modes, several, subgraphs, version)

    async def _parts(
        self,
        input: Any,
        config: Mapping[str, Any] | None,
        modes: tuple[StreamMode, ...],
        several: bool,
        subgraphs: bool,
        version: str,
    ) -> AsyncGenerator[Any, None]:
        config = run_config(config)
        projection = self.stream_projection(modes, config)
        async for part in self._streamed(input, config, projection):
            if part.ns and not subgraphs:
                continue  # a subgraph's part: shown with subgraphs=True, under its namespace
            yield shaped(part, several=several, subgraphs=subgraphs, version=version)

    def stream_projection(
        self, modes: Sequence[StreamMode], config: Mapping[str, Any]
    ) -> ModeProjection:
        """How a run's commits become the stream modes' parts: a front with state or
        messages of its own shape overrides this to pass its `values_of` / `message_of`."""
        nodes = frozenset(self.graph.nodes)
        return ModeProjection(frozenset(modes), str(config["thread_id"]), nodes)

    async def _streamed(
        self, input: Any, config: Mapping[str, Any] | None, projection: ModeProjection | None
    ) -> AsyncGenerator[Any, None]:
        config = run_config(config)
        check_tracing(config)  # refused here, not inside the stream's task
        stream = RunStream(config["thread_id"], projection=projection).start()
        chunks = stream.subscribe()
        task = asyncio.ensure_future(self._run(input, config, stream=stream))
        why = "the astream consumer stopped reading before the run ended"
        try:
            while True:
                chunk = await chunks.get()
                if chunk is END_OF_STREAM:
                    break
                yield chunk
            await task
        except asyncio.CancelledError as exc:
            if exc.args and exc.args[0]:
                why = str(exc.args[0])  # the consumer itself was cancelled: say by what
            raise
        finally:
            if not task.done():
                task.cancel(why)
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await stream.stop(drain=False)

    def stream(
        self,
        input: Any = None,
        config: Mapping[str, Any] | None = None,
        *,
        stream_mode: str | Sequence[str] | None = None,
        subgraphs: bool = False,
        version: str = "v1",
        context: Any = None,
        durability: Durability | None = None,
    ) -> Iterator[Any]:
        """Blocking `astream` (a bad mode raises here, before the run starts)."""
        parts = self.astream(
            input,
            config,
            stream_mode=stream_mode,
            subgraphs=subgraphs,
            version=version,
            context=context,
            durability=durability,
        )
        assert isinstance(parts, AsyncGenerator)
        return self._iterating(parts)


__all__ = ["Streaming"]
