"""The edge between the log and the Agent Server's wire format: status words by the one
table, ISO dates, checkpoint ids that name a seq and its chain hash, messages as LangChain
dicts, and LangChain dicts read back as messages."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentlog.actors.http.agentserver import wire
from agentlog.projections import ExecutionStatus, Message


def test_every_fold_status_has_one_agent_server_word() -> None:
    assert set(wire.THREAD_STATUS) == set(ExecutionStatus)
    assert set(wire.THREAD_STATUS.values()) <= {"idle", "busy", "interrupted", "error"}
    assert wire.thread_status(ExecutionStatus.COMPLETED, busy=True) == "busy"
    assert wire.thread_status(ExecutionStatus.INTERRUPTED_BEFORE, busy=False) == "interrupted"


def test_run_words() -> None:
    assert wire.run_status(None, running=False) == "pending"
    assert wire.run_status(None, running=True) == "running"
    assert wire.run_status("completed", running=False) == "success"
    assert wire.run_status("cancelled", running=False) == "interrupted"
    assert wire.run_status("failed", running=False, error_type="TimeoutError") == "timeout"
    assert wire.run_status("failed", running=False, error_type="ValueError") == "error"


def test_dates_are_iso_utc() -> None:
    assert wire.iso(0.0) == "1970-01-01T00:00:00+00:00"
    assert wire.iso(None) is None
    assert wire.iso(float("nan")) is None


@given(
    st.integers(min_value=1, max_value=10**12),
    st.text("0123456789abcdef", min_size=64, max_size=64),
)
def test_a_checkpoint_id_names_its_seq_and_hash(seq: int, digest: str) -> None:
    ident = wire.checkpoint_id(seq, digest)
    assert wire.parse_checkpoint_id(ident) == (seq, digest[: wire.HASH_DIGITS])


@pytest.mark.parametrize(
    "bad", ["", "12", "x-" + "0" * 24, "3-" + "g" * 24, "3-abc", "-1-" + "0" * 24]
)
def test_a_malformed_checkpoint_id_is_refused(bad: str) -> None:
    with pytest.raises(wire.BadCheckpointError, match="not one of this server's"):
        wire.parse_checkpoint_id(bad)


def test_messages_go_out_as_langchain_dicts_and_come_back() -> None:
    message = Message.text_message("hello", role="user")
    shown = wire.jsonable({"messages": [message], "n": (1, 2)})
    out = shown["messages"][0]
    assert out["type"] == "human" and out["content"] == "hello" and out["id"] == message.message_id
    assert shown["n"] == [1, 2]
    back = wire.incoming({"messages": [out], "other": {"type": "text", "content": "kept"}})
    read = Message.model_validate(back["messages"][0])
    assert read.role == "user" and read.message_id == message.message_id
    assert back["other"] == {"type": "text", "content": "kept"}
