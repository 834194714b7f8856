"""The OpenAPI document against the server it describes: schemathesis calls every operation
of a real `agentlog serve` on a loopback port (bounded examples, fixed seed) and fails on a
5xx, a status the operation does not declare, an answer that does not match its declared
schema, or a content type it does not declare."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_agentserver_clients import serving

CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "response_schema_conformance",
    "content_type_conformance",
)


@pytest.mark.slow
def test_every_answer_matches_the_openapi_document(tmp_path: Path) -> None:
    cli = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    assert cli is not None, "schemathesis is a dev dependency: pip install -e '.[dev]'"
    with serving(tmp_path) as url:
        ran = subprocess.run(
            [cli, "run", f"{url}/openapi.json", "-H", "x-api-key: sk-ann",
             "--checks", ",".join(CHECKS), "--phases", "examples,fuzzing",
             "--max-examples", "5", "--seed", "1", "--no-color",
             "--request-timeout", "30"],
            capture_output=True, text=True, timeout=300, cwd=tmp_path,
        )  # fmt: skip
    assert ran.returncode == 0, ran.stdout[-6000:] + ran.stderr[-2000:]
    generated = [line for line in ran.stdout.splitlines() if " generated, " in line]
    assert generated and generated[-1].strip().endswith(" passed"), ran.stdout[-2000:]
