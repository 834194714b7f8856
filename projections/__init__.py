"""The state: AgentState and friends, reducers, the fold, and views over a store.

Nothing here runs tasks: a projection is a pure function of the log.
"""

from .context import BaseContextManager, MessageContextManager
from .edge import message_appended, messages_appended, messages_replaced, state_updated, to_builtins
from .errors import IllegalTransitionError, InvalidStateUpdateError, ProjectionError
from .fold import Fold, apply, decide, replay
from .messages import (
    AnnotationBlock,
    AnnotationRef,
    AudioBlock,
    ContentBlock,
    DataBlock,
    DocumentBlock,
    ErrorBlock,
    ImageBlock,
    MediaRef,
    Message,
    ReasoningBlock,
    RemoteToolCallBlock,
    TextBlock,
    TokenUsages,
    ToolCallBlock,
    ToolResultBlock,
    VideoBlock,
    generate_id,
)
from .reducers import (
    add_messages,
    append_items,
    remove_tool_messages,
    replace_messages,
    replace_value,
)
from .state import END, START, AgentState, ExecutionState, ExecutionStatus, StopRequestStatus
from .stream import StreamChunk, StreamEvent
from .views import PointOutOfRangeError, fold_at, snapshot_of, state_at, take_snapshot

__all__ = [
    "END",
    "START",
    "AgentState",
    "AnnotationBlock",
    "AnnotationRef",
    "AudioBlock",
    "BaseContextManager",
    "ContentBlock",
    "DataBlock",
    "DocumentBlock",
    "ErrorBlock",
    "ExecutionState",
    "ExecutionStatus",
    "Fold",
    "IllegalTransitionError",
    "ImageBlock",
    "InvalidStateUpdateError",
    "MediaRef",
    "Message",
    "MessageContextManager",
    "PointOutOfRangeError",
    "ProjectionError",
    "ReasoningBlock",
    "RemoteToolCallBlock",
    "StopRequestStatus",
    "StreamChunk",
    "StreamEvent",
    "TextBlock",
    "TokenUsages",
    "ToolCallBlock",
    "ToolResultBlock",
    "VideoBlock",
    "add_messages",
    "append_items",
    "apply",
    "decide",
    "fold_at",
    "generate_id",
    "message_appended",
    "messages_appended",
    "messages_replaced",
    "remove_tool_messages",
    "replace_messages",
    "replace_value",
    "replay",
    "snapshot_of",
    "state_at",
    "state_updated",
    "take_snapshot",
    "to_builtins",
]
