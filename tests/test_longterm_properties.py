"""Any sequence of puts and deletes, made by two stores sharing one log, folds to what a
plain dict says; a store reopened on the same log answers the same, and the chain verifies."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.actors import LogStore
from agentlog.actors.engine.threads import STORE_THREAD
from agentlog.events import EventStore, MemoryEventStore, SQLiteEventStore
from agentlog.projections.longterm import StoreIndex

NAMESPACES = [("a",), ("a", "b"), ("c",)]
KEYS = ["k1", "k2", "k3"]

Op = tuple[str, int, tuple[str, ...], str, dict[str, Any]]
ops = st.lists(
    st.tuples(
        st.sampled_from(["put", "put", "delete"]),
        st.integers(0, 1),  # which of the two stores makes the write
        st.sampled_from(NAMESPACES),
        st.sampled_from(KEYS),
        st.fixed_dictionaries({"v": st.integers(0, 3), "tag": st.sampled_from(["x", "y"])}),
    ),
    max_size=25,
)

Model = dict[tuple[str, ...], dict[str, dict[str, Any]]]


def model_of(sequence: list[Op]) -> Model:
    """What the store should hold: dicts keep the order namespaces and keys were first put
    in (a delete of what was never put changes nothing)."""
    model: Model = {}
    for op, _, namespace, key, value in sequence:
        if op == "put":
            model.setdefault(namespace, {})[key] = value
        else:
            model.get(namespace, {}).pop(key, None)
    return model


async def answers(store: LogStore) -> dict[str, Any]:
    """Everything a reader can ask of the store, as plain data."""
    return {
        "get": {
            (ns, key): None if (item := await store.aget(ns, key)) is None else item.value
            for ns in NAMESPACES
            for key in KEYS
        },
        "all": [(i.namespace, i.key, i.value) for i in await store.asearch((), limit=100)],
        "tag x": [(i.namespace, i.key) for i in await store.asearch((), filter={"tag": "x"})],
        "namespaces": await store.alist_namespaces(),
    }


def expected(model: Model) -> dict[str, Any]:
    flat = [(ns, key, value) for ns, keys in model.items() for key, value in keys.items()]
    return {
        "get": {(ns, key): model.get(ns, {}).get(key) for ns in NAMESPACES for key in KEYS},
        "all": flat,
        "tag x": [(ns, key) for ns, key, value in flat if value["tag"] == "x"][:10],
        "namespaces": sorted(ns for ns, keys in model.items() if keys),
    }


async def check(log: EventStore, sequence: list[Op], reopen: EventStore) -> None:
    writers = [LogStore(log), LogStore(log)]
    for op, who, namespace, key, value in sequence:
        if op == "put":
            await writers[who].aput(namespace, key, value)
        else:
            await writers[who].adelete(namespace, key)
    want = expected(model_of(sequence))
    for store in (*writers, LogStore(reopen)):
        assert await answers(store) == want
    if sequence:
        folded = StoreIndex()
        async for record in reopen.read(STORE_THREAD):
            folded.apply(record)
        assert folded.items == writers[0].index.items
        assert (await reopen.verify(STORE_THREAD)).ok


@settings(max_examples=60, deadline=None)
@given(sequence=ops)
def test_writes_fold_to_the_dict_model_in_memory(sequence: list[Op]) -> None:
    log = MemoryEventStore()
    asyncio.run(check(log, sequence, log))


@settings(max_examples=15, deadline=None)
@given(sequence=ops)
def test_writes_fold_to_the_dict_model_on_sqlite_and_reopen_the_same(sequence: list[Op]) -> None:
    async def drive(path: Path) -> None:
        async with SQLiteEventStore(path) as log, SQLiteEventStore(path) as reopened:
            await check(log, sequence, reopened)

    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(drive(Path(folder) / "store.db"))
