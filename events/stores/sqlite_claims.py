"""The SQLite store's claim statements, each run on the writer's connection (or, to read a
holder, the reader's): take, drop, relabel and renew a thread's claim."""

from __future__ import annotations

import sqlite3

from agentlog.events.claims import Claim, Holder, lost_under

HOLDER_COLUMNS = "token, host, pid, started, heartbeat_at, lease, purpose"


def take_claim(
    conn: sqlite3.Connection, claim: Claim, now: float, under: Claim | None = None
) -> tuple[int, str | None]:
    """Record `claim` unless a live owner holds the thread (or `under` is no longer held);
    a dead owner's claim is replaced. The thread's last seq (0: none) and the subject it
    is tagged with (None: none), read in the same transaction: a run needs no read of
    its own for either."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if under is not None:
            outer = fetch_holder(conn, under.thread_id)
            if outer is None or outer.token != under.token:
                raise lost_under(claim, under)
        holder = fetch_holder(conn, claim.thread_id)
        if holder is not None and holder.alive(now):
            raise holder.busy_error(claim.thread_id, now)
        conn.execute(
            f"INSERT OR REPLACE INTO claims (thread_id, {HOLDER_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                claim.thread_id, claim.token, claim.host, claim.pid, claim.started, now,
                claim.lease, claim.purpose,
            ),
        )  # fmt: skip
        head = conn.execute(
            "SELECT last_seq FROM threads WHERE thread_id = ?", (claim.thread_id,)
        ).fetchone()
        subject = _tag_of(conn, claim.thread_id)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return (0 if head is None else int(head[0])), subject


def _tag_of(conn: sqlite3.Connection, thread_id: str) -> str | None:
    try:
        row = conn.execute(
            "SELECT subject FROM subject_threads WHERE thread_id = ?", (thread_id,)
        ).fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):  # no thread of this file was ever tagged
            return None
        raise
    return None if row is None else str(row[0])


def drop_claim(conn: sqlite3.Connection, thread_id: str, token: str) -> None:
    conn.execute("DELETE FROM claims WHERE thread_id = ? AND token = ?", (thread_id, token))


def relabel_claim(conn: sqlite3.Connection, thread_id: str, token: str, purpose: str) -> None:
    conn.execute(
        "UPDATE claims SET purpose = ? WHERE thread_id = ? AND token = ?",
        (purpose, thread_id, token),
    )


def renew_claims(conn: sqlite3.Connection, tokens: list[str], now: float) -> None:
    beats = [(now, token) for token in tokens]
    conn.executemany("UPDATE claims SET heartbeat_at = ? WHERE token = ?", beats)


def fetch_holder(conn: sqlite3.Connection, thread_id: str) -> Holder | None:
    try:
        row = conn.execute(
            f"SELECT {HOLDER_COLUMNS} FROM claims WHERE thread_id = ?", (thread_id,)
        ).fetchone()
    except sqlite3.OperationalError:  # a read-only copy written before claims existed
        return None
    return None if row is None else Holder(*row)
