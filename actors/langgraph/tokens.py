"""Token chunks of a LangChain chat model called inside a node, handed to the `messages`
stream mode as LangGraph hands them: a callback the model finds in the context it runs in,
which also makes a plain `invoke` stream its tokens."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

from agentlog.actors.engine.writer import StreamWriter, message_writer


@contextlib.contextmanager
def tokens_streamed() -> Iterator[None]:
    """While inside, a LangChain chat model called without its own callbacks streams its
    token chunks to the run's `messages` mode (nothing happens when no one reads it)."""
    write = message_writer()
    if write is None or "langchain_core" not in sys.modules:
        yield
        return
    from langchain_core.runnables.config import var_child_runnable_config

    token = var_child_runnable_config.set({"callbacks": [_tap(write)]})
    try:
        yield
    finally:
        var_child_runnable_config.reset(token)


def _tap(write: StreamWriter) -> Any:
    from langchain_core.callbacks import BaseCallbackHandler

    class TokenTap(BaseCallbackHandler):
        """Hands each new token's message chunk to the stream. Its two `tap_output_*`
        methods mark it a streaming handler, so a chat model's `invoke` streams."""

        run_inline = True

        def on_llm_new_token(self, token: Any, *, chunk: Any = None, **kwargs: Any) -> None:
            message = getattr(chunk, "message", None)
            if message is not None:
                write(message)

        def tap_output_aiter(self, run_id: Any, output: AsyncIterator[Any]) -> AsyncIterator[Any]:
            return output

        def tap_output_iter(self, run_id: Any, output: Iterator[Any]) -> Iterator[Any]:
            return output

    return TokenTap()
