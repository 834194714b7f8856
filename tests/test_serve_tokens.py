"""Token files: read strictly, stored hashed, checked in constant time, rights and graphs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentlog.actors.http.tokens import (
    Forbidden,
    TokenBook,
    TokenFileError,
    Unauthorized,
    hash_token,
)
from tests.helpers import counted_digest_compares


def write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "tokens.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def entry(**over: Any) -> dict[str, Any]:
    return {
        "name": "alice",
        "sha256": hash_token("s"),
        "graphs": ["support"],
        "rights": ["read"],
        **over,
    }


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ("{nope", "is not JSON"),
        ({"tokens": []}, "one token or more"),
        ([entry()], "one token or more"),
        ({"tokens": [entry(name="")]}, "name must be"),
        ({"tokens": [entry(sha256="s")]}, "64 hex digits"),
        ({"tokens": [entry(sha256="z" * 64)]}, "64 hex digits"),
        ({"tokens": [entry(rights=["root"])]}, "rights must be"),
        ({"tokens": [entry(rights=[])]}, "rights must be"),
        ({"tokens": [entry(graphs="support")]}, "graphs must be"),
        ({"tokens": [entry(), entry(name="bob")]}, "listed twice"),
        ({"tokens": [entry(), entry(sha256=hash_token("t"))]}, "used twice"),
    ],
)
def test_a_bad_token_file_is_refused_saying_where(tmp_path: Path, data: Any, words: str) -> None:
    with pytest.raises(TokenFileError, match=words):
        TokenBook.load(write(tmp_path, data))


def test_a_missing_token_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TokenFileError, match="cannot read"):
        TokenBook.load(tmp_path / "nope.json")


def test_tokens_rights_and_graphs(tmp_path: Path) -> None:
    book = TokenBook.load(
        write(
            tmp_path,
            {
                "tokens": [
                    entry(),
                    entry(name="ops", sha256=hash_token("o"), graphs=["*"], rights=["admin"]),
                ]
            },
        )
    )
    alice = book.check("Bearer s")
    assert alice.name == "alice" and alice.may("read", "support")
    assert not alice.may("read", "billing") and not alice.may("run", "support")
    with pytest.raises(Forbidden, match="lacks the 'run' right on graph 'support'"):
        alice.require("run", "support")
    ops = book.check("Bearer o")
    assert ops.may("edit", "anything") and ops.may("admin")
    for header in (None, "", "Basic s", "Bearer nope"):
        with pytest.raises(Unauthorized):
            book.check(header)


def test_the_environment_names_the_token_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENTLOG_TOKENS_FILE", raising=False)
    assert TokenBook.from_environment() is None
    monkeypatch.setenv("AGENTLOG_TOKENS_FILE", str(write(tmp_path, {"tokens": [entry()]})))
    book = TokenBook.from_environment()
    assert book is not None and len(book) == 1


def test_a_token_is_compared_with_every_known_hash_in_constant_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No early exit: the time a check takes does not tell which token (if any) matched."""
    others = [entry(name=f"t{i}", sha256=hash_token(f"s{i}")) for i in range(4)]
    book = TokenBook.load(write(tmp_path, {"tokens": [entry(), *others]}))
    compared = counted_digest_compares(monkeypatch)
    for header, name in (("Bearer s", "alice"), ("Bearer s3", "t3"), ("Bearer unknown", None)):
        compared.clear()
        if name is None:
            with pytest.raises(Unauthorized):
                book.check(header)
        else:
            assert book.check(header).name == name
        assert len(compared) == 5, header
