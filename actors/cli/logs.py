"""Logging for the long-running commands (`agentlog serve`, `agentlog otel`): one handler on
stderr for agentlog's logger tree (`agentlog.*`) and the HTTP server's (`uvicorn.*`, whose
`uvicorn.access` writes the access log), as text lines or, with `--log-json`, one JSON
object per line carrying the record's structured fields (`extra=`: thread_id, run_id,
node, seq, kind, ...).

Set up once per process: a second call replaces the handler it installed, never adds one.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from enum import StrEnum
from typing import IO, Annotated, Any

import typer


class Level(StrEnum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


LogLevel = Annotated[
    Level,
    typer.Option(
        "--log-level",
        metavar="LEVEL",
        help="What to log on stderr: debug (a line per committed record), info (a line per "
        "run start and end, and per HTTP request), warning or error.",
    ),
]
LogJson = Annotated[
    bool, typer.Option("--log-json", help="Log one JSON object per line, with its fields.")
]

LOGGERS = ("agentlog", "uvicorn")
"""The logger trees the handler serves."""
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """A record as one JSON object: time, level, logger, message and every `extra=` field."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in record.__dict__.items():
            if name not in _STANDARD and not name.startswith("_"):
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=repr, ensure_ascii=False)


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler `setup_logging` installs (so a second call finds and replaces it)."""


def setup_logging(level: Level | str, as_json: bool, stream: IO[str] | None = None) -> None:
    """Log agentlog's and uvicorn's records at `level` and above to `stream` (stderr)."""
    handler = _Handler(stream or sys.stderr)
    handler.setFormatter(
        JsonFormatter()
        if as_json
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    for name in LOGGERS:
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if isinstance(h, _Handler)]:
            logger.removeHandler(old)
        logger.addHandler(handler)
        logger.setLevel(str(level).upper())
        logger.propagate = False  # the root's handlers would print the same line again
