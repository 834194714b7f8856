"""A fork server for the worker programs: their processes, without their start-up each time.

The crash tests start a worker process for every kill and every resume (about 150 for
test_crash_recovery alone), and each of those spent ~0.3 s of CPU importing Python and
agentlog before doing ~0.05 s of work. The server (`python -m tests.workers.zygote`, one per
test process, started on first use) imports agentlog once; each request forks it, and the
child runs `tests.workers.<module>` as `python -m` would (`__main__`, `sys.argv`, the test's
environment and working directory, its stdout and stderr on pipes the test reads). The child
is a real process of its own that nothing else runs in: it is SIGKILLed, exits and is
reaped like one started by `subprocess.Popen`; the server reports its exit code.

The server must fork while single-threaded: it runs no event loop and starts no thread, and
refuses a request if something it imported did.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent.parent
MESSAGE = 1 << 20
"""The largest request or report (the environment travels with each request)."""


# ---- the server ---------------------------------------------------------------------------


def _child(request: dict[str, Any], fds: list[int], server: socket.socket) -> None:
    """In the forked child: become `python -m tests.workers.<module> ARGS`; never returns."""
    code: int = 1
    try:
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        server.close()
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # as Popen's close_fds: nothing else leaks
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        module = f"tests.workers.{request['module']}"
        sys.argv = [module, *request["args"]]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()  # what the interpreter's own exit would run
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve(server: socket.socket) -> None:
    """Fork a child per request, report its pid, then its exit code once reaped; return
    when the test process closes its end."""
    selector = selectors.DefaultSelector()
    selector.register(server, selectors.EVENT_READ, None)
    while True:
        for key, _ in selector.select():
            if key.data is None:
                data, fds, _, _ = socket.recv_fds(server, MESSAGE, 2)
                if not data:
                    return
                request = json.loads(data)
                importlib.import_module(f"tests.workers.{request['module']}")  # shared from now on
                if threading.active_count() != 1:
                    raise RuntimeError("the fork server started a thread: it cannot fork safely")
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    _child(request, fds, server)
                for fd in fds:
                    os.close(fd)
                selector.register(os.pidfd_open(pid), selectors.EVENT_READ, pid)
                server.send(json.dumps({"pid": pid}).encode())
            else:
                selector.unregister(key.fd)
                os.close(key.fd)
                _, status = os.waitpid(key.data, 0)
                code = os.waitstatus_to_exitcode(status)
                server.send(json.dumps({"exit": key.data, "code": code}).encode())


def main() -> None:
    import agentlog.actors
    import agentlog.events
    import agentlog.projections  # noqa: F401  (the start-up every child shares)

    serve(socket.socket(fileno=int(sys.argv[1])))


# ---- the test's side ----------------------------------------------------------------------


class Zygote:
    """The test process's connection to its fork server."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.server = subprocess.Popen(
            [sys.executable, "-m", "tests.workers.zygote", str(theirs.fileno())],
            cwd=ROOT, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
        )  # fmt: skip
        theirs.close()
        self.socket = ours
        self.lock = threading.Lock()
        self.exits: dict[int, int] = {}
        atexit.register(self.close)

    def _receive(self, timeout: float | None) -> dict[str, Any] | None:
        """One report from the server, or None if none came within `timeout`."""
        self.socket.settimeout(timeout)
        try:
            data = self.socket.recv(MESSAGE)
        except (TimeoutError, BlockingIOError):
            return None
        if not data:
            raise RuntimeError(f"the fork server ended (exit {self.server.poll()})")
        report: dict[str, Any] = json.loads(data)
        if "exit" in report:
            self.exits[report["exit"]] = report["code"]
        return report

    def fork(self, module: str, args: list[str]) -> ForkedWorker:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        request = {"module": module, "args": args, "env": dict(os.environ), "cwd": str(ROOT)}
        with self.lock:
            try:
                socket.send_fds(self.socket, [json.dumps(request).encode()], [out_w, err_w])
            finally:
                os.close(out_w)
                os.close(err_w)
            while True:
                report = self._receive(None)
                if report is not None and "pid" in report:
                    break
        return ForkedWorker(self, report["pid"], open(out_r), open(err_r))

    def exit_code(self, pid: int, timeout: float | None) -> int | None:
        """The exit code of child `pid`, waiting up to `timeout` seconds (0: just look)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            while pid not in self.exits:
                left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                if self._receive(left) is None and left == 0.0:
                    return None
            return self.exits[pid]

    def close(self) -> None:
        self.socket.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.server.wait(timeout=10)


class ForkedWorker:
    """A child of the fork server, with the part of `subprocess.Popen` the tests use."""

    def __init__(self, zygote: Zygote, pid: int, stdout: IO[str], stderr: IO[str]) -> None:
        self.zygote = zygote
        self.pid = pid
        self.stdout: IO[str] | None = stdout
        self.stderr: IO[str] | None = stderr
        self.returncode: int | None = None
        self._readers: list[threading.Thread] = []
        self._output: dict[str, str] = {}

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.zygote.exit_code(self.pid, 0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self.zygote.exit_code(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0.0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Read stdout and stderr to their ends (what a readline left included), then wait."""
        if not self._readers:
            for name, stream in (("out", self.stdout), ("err", self.stderr)):
                assert stream is not None
                reader = threading.Thread(target=self._read, args=(name, stream), daemon=True)
                reader.start()
                self._readers.append(reader)
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader in self._readers:
            reader.join(None if deadline is None else max(deadline - time.monotonic(), 0.0))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0.0)
        self.wait(None if deadline is None else max(deadline - time.monotonic(), 0.0))
        return self._output["out"], self._output["err"]

    def _read(self, name: str, stream: IO[str]) -> None:
        with stream:
            self._output[name] = stream.read()


if __name__ == "__main__":
    main()
