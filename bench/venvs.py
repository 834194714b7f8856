"""The peers' virtual environments (.bench-venvs/<name>), made from exact pins when missing or
when their pins changed; used by bench/compare.py and by the tests that run LangGraph's own
programs beside their ports.

Usage: python bench/venvs.py langgraph   (makes it if needed, prints its python)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENVS = ROOT / ".bench-venvs"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# Exact versions, so that every machine measures the same peers; the venv's stamp holds
# this list, and a venv whose stamp differs is made again.
PACKAGES = {
    "langgraph": [
        "langgraph==1.2.22",
        "langgraph-checkpoint==4.3.2",
        "langgraph-checkpoint-sqlite==3.1.2",
        "langgraph-prebuilt==1.1.2",
        "langgraph-sdk==0.4.14",
        "langchain-core==1.7.2",
        "aiosqlite==0.22.1",
    ],
    "agentflow": ["10xscale-agentflow[sqlite_checkpoint]==0.10.1", "aiosqlite==0.22.1"],
}


def _version_of(python: str) -> tuple[int, int] | None:
    """The (major, minor) of an interpreter that really runs (pyenv shims may not)."""
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    major, minor = out.stdout.split()
    return int(major), int(minor)


def newest_python() -> str | None:
    """The newest python3.13 / python3.12 on the machine that actually runs.

    A pyenv shim on PATH may refuse to run unless PYENV_VERSION names a version, so the
    interpreters under `$PYENV_ROOT/versions` (default ~/.pyenv) are tried directly too.
    """
    for minor in (13, 12):
        name = f"python3.{minor}"
        candidates = [shutil.which(name)]
        pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
        if pyenv.is_dir():
            candidates += [str(p) for p in sorted(pyenv.glob(f"3.{minor}*/bin/{name}"))[::-1]]
        for candidate in candidates:
            if candidate and _version_of(candidate) == (3, minor):
                return candidate
    return None


def setup_venv(system: str, base_python: str | None) -> tuple[Path | None, str | None]:
    """The venv python of a peer, made (again) when missing or its stamp is not the pins."""
    venv = VENVS / system
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    wanted = " ".join(PACKAGES[system])
    if python.exists() and stamp.exists() and stamp.read_text().strip() == wanted:
        return python, None
    if base_python is None:
        return None, "no python3.12+ found for its venv"
    log(f"setting up {venv} with {base_python}: pip install {wanted}")
    try:
        stamp.unlink(missing_ok=True)
        # --clear: a venv made for other pins starts empty, so nothing stale stays behind
        subprocess.run([base_python, "-m", "venv", "--clear", str(venv)], check=True, timeout=300)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"],
            check=True,
            timeout=600,
        )
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", *PACKAGES[system]],
            check=True,
            timeout=900,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"venv setup failed: {exc}"
    stamp.write_text(wanted + "\n")
    return python, None


def main() -> int:
    (system,) = sys.argv[1:] or ("langgraph",)
    python, why = setup_venv(system, newest_python() or sys.executable)
    if python is None:
        print(f"{system}: {why}", file=sys.stderr)
        return 1
    print(python)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
