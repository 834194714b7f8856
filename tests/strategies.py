"""Hypothesis strategies for the values a state can hold, and an exact comparison for them.

The log must give back exactly what it was given: NaN, the infinities and -0.0 stay floats,
bytes stay bytes, ints stay ints up to the 64-bit edge. Values past that edge (ints beyond
64 bits, text with lone surrogates) must be refused clearly; strategies for them are here too.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

from agentlog.events.verify_export import same as exactly_same

INT_MIN, INT_MAX = -(2**63), 2**64 - 1
"""The ints MessagePack stores natively."""

special_floats = st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 0.0, 5e-324, 1.7e308])
floats = st.floats(allow_nan=True, allow_infinity=True) | special_floats
"""Any float, with NaN, the infinities, -0.0 and the extremes drawn often."""

storable_ints = st.integers(INT_MIN, INT_MAX) | st.sampled_from(
    [INT_MIN, INT_MIN + 1, -1, 0, 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, INT_MAX]
)
"""Ints the log stores exactly: from -2**63 up to 2**64-1, edges included."""

big_ints = st.integers(min_value=INT_MAX + 1) | st.integers(max_value=INT_MIN - 1)
"""Ints beyond 64 bits: an event must refuse them, a snapshot keeps them."""

text = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
"""Valid Unicode text, including NUL, control characters and astral code points."""

lone_surrogate_text = st.builds(
    lambda before, surrogate, after: before + surrogate + after,
    text,
    st.characters(categories=["Cs"]),
    text,
)
"""Text holding a lone surrogate: no valid UTF-8 encoding exists, so it must be refused."""

binary = st.binary(max_size=16) | st.sampled_from([b"", b"\x00\xff", b"\xff\xfe\xfd", b"\x80"])
"""Bytes, including sequences that are not valid UTF-8."""

leaves = st.none() | st.booleans() | storable_ints | floats | text | binary
"""Every scalar the log stores exactly."""


def data(leaf: st.SearchStrategy[Any] = leaves, max_leaves: int = 24) -> st.SearchStrategy[Any]:
    """Nested `Any` data: dicts with str keys and lists, several levels deep, of `leaf`."""
    return st.recursive(
        leaf,
        lambda children: (
            st.lists(children, max_size=4) | st.dictionaries(text, children, max_size=4)
        ),
        max_leaves=max_leaves,
    )


def deep(leaf: st.SearchStrategy[Any] = leaves, depth: int = 40) -> st.SearchStrategy[Any]:
    """One value buried `depth` levels down, alternating lists and dicts."""

    def bury(value: Any) -> Any:
        for level in range(depth):
            value = [value] if level % 2 else {"k": value}
        return value

    return leaf.map(bury)


def same(a: Any, b: Any) -> bool:
    """Exact equality: types match, NaN equals NaN, -0.0 differs from 0.0, bytes stay bytes.

    `==` is too lenient for a round trip (1 == 1.0 == True, b"x" == bytearray(b"x"),
    -0.0 == 0.0) and too strict for NaN; this is the comparison the tests need.
    """
    return exactly_same(a, b, ordered=True)
