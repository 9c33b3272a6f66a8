"""`ars ARGS` as a real process of its own, forked from an interpreter that has already imported it.

The suite runs `ars` as a fresh process well over a thousand times. A fresh interpreter spends most
of a short command on starting Python and importing click and the package (0.1-0.3 s of CPU each on
a 2-core machine), which made this the largest single cost of `make test`. Here each xdist worker
keeps one warm interpreter (the zygote) that imports the package once and forks for every call:

    zygote --fork--> keeper --fork--> ars
                     (waits, reports the exit status)

The `ars` process is what `python -m autoresearch_skills.cli ARGS` would be: its own pid, the
requested working directory, environment and standard streams, `sys.path[0]` the working directory,
`sys.argv` as `-m` sets it, and a normal interpreter exit (atexit handlers, exit code 128 + N or
-N for a signal, a traceback for an uncaught exception). What it skips is the start-up.

A call whose environment changes what the interpreter reads at start-up (PYTHON*, the locale) runs
`python -m` for real. So do tests that need the process as a Popen (kills, detached loops).
"""

from __future__ import annotations

import atexit
import json
import locale
import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

COMMAND = [sys.executable, "-m", "autoresearch_skills.cli"]
START_TIMEOUT = 60.0  # seconds for the zygote to import the package on a loaded machine

# Runs in the zygote (`python -c`). Modules imported here are shared by every forked `ars`; only
# the package itself and what it imports at module level, so nothing runs that `ars` would not.
_ZYGOTE = r"""
import importlib, json, os, pkgutil, signal, socket, sys, time
import autoresearch_skills, autoresearch_skills.cli as cli
signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh `ars` from a shell has them,
signal.signal(signal.SIGTERM, signal.SIG_DFL)  # whatever the worker had when it started this one
signal.signal(signal.SIGHUP, signal.SIG_DFL)
# Not these: numpy (a BLAS that sizes its threads from the environment at import), starlette and Ray.
COLD = ("autoresearch_skills.reward.", "autoresearch_skills.dashboard.server", "autoresearch_skills.launch.ray")
for info in pkgutil.walk_packages(autoresearch_skills.__path__, "autoresearch_skills."):
    if not info.name.startswith(COLD):
        importlib.import_module(info.name)
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(sys.argv[1])
listener.listen(64)
sys.stdout.write("ready\n")
sys.stdout.flush()
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the keepers
worker = os.getppid()
listener.settimeout(2.0)
while True:
    try:
        connection, _ = listener.accept()
    except TimeoutError:
        if os.getppid() != worker:  # the worker is gone (killed): so is its zygote
            raise SystemExit(0)
        continue
    connection.settimeout(None)
    if os.fork():
        connection.close()
        continue
    listener.close()  # the keeper: starts the ars process, says its pid, then how it ended
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    request = json.loads(connection.makefile("r").readline())
    pid = os.fork()
    if pid:
        connection.sendall(f"{pid}\n".encode())
        _, status = os.waitpid(pid, 0)
        connection.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
        os._exit(0)
    connection.close()  # the ars process: from here on, what `python -m autoresearch_skills.cli` does
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    time.tzset()  # TZ, as a fresh interpreter reads it
    for fd, (path, flags) in enumerate(request["streams"]):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    sys.path[0] = os.getcwd()
    sys.argv = [cli.__file__, *request["args"]]
    cli.main()
    break
"""


class _Zygote:
    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="ars-zygote-")
        self.address = os.path.join(self.folder, "socket")
        self.env = dict(os.environ)
        self.process = subprocess.Popen(
            [sys.executable, "-c", _ZYGOTE, self.address],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
            env=self.env,
        )
        line = self.process.stdout.readline() if self.process.stdout else ""
        if line.strip() != "ready":
            raise RuntimeError(f"the warm `ars` interpreter did not start (exit {self.process.poll()})")
        atexit.register(self.stop)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        for leftover in Path(self.folder).iterdir():
            leftover.unlink()
        os.rmdir(self.folder)


_zygote: _Zygote | None = None


def _warm() -> _Zygote:
    global _zygote
    if _zygote is None or _zygote.process.poll() is not None:
        _zygote = _Zygote()
    return _zygote


def _starts_the_same(env: dict[str, str], zygote_env: dict[str, str]) -> bool:
    """True when no variable that Python reads at start-up (its own, the locale) differs from the zygote's."""
    names = {name for name in (*env, *zygote_env) if name.startswith(("PYTHON", "LC_", "LANG"))}
    return all(env.get(name) == zygote_env.get(name) for name in names)


def run(
    *args: str,
    cwd: str | Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """What `subprocess.run(python -m autoresearch_skills.cli ARGS, capture_output=True, text=True)`
    returns, with `env` the whole environment (None: this process's)."""
    full_env = dict(os.environ if env is None else env)
    command = [*COMMAND, *args]
    zygote = _warm()
    if not _starts_the_same(full_env, zygote.env):
        return subprocess.run(
            command, cwd=cwd, env=full_env, input=input, capture_output=True, text=True, timeout=timeout
        )
    with tempfile.TemporaryDirectory(prefix="ars-call-") as folder:
        stdin, stdout, stderr = (os.path.join(folder, name) for name in ("in", "out", "err"))
        Path(stdin).write_text(input or "")  # no input: an empty file, read as /dev/null reads
        for path in (stdout, stderr):
            Path(path).touch()
        request = {
            "args": list(args),
            "cwd": str(Path(cwd or os.getcwd()).resolve()),
            "env": full_env,
            "streams": [(stdin, os.O_RDONLY), (stdout, os.O_WRONLY), (stderr, os.O_WRONLY)],
        }
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.connect(zygote.address)
            connection.sendall((json.dumps(request) + "\n").encode())
            pending = bytearray()
            pid = int(_line(connection, pending, None))
            try:
                code = int(_line(connection, pending, timeout))
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                _line(connection, pending, None)  # the keeper has reaped it
                raise subprocess.TimeoutExpired(command, timeout or 0, _read(stdout), _read(stderr)) from None
        return subprocess.CompletedProcess(command, code, _read(stdout), _read(stderr))


def _line(connection: socket.socket, pending: bytearray, timeout: float | None) -> str:
    """The keeper's next reply line (both may come in one read); TimeoutError past `timeout` seconds."""
    connection.settimeout(timeout)
    while b"\n" not in pending:
        chunk = connection.recv(64)
        if not chunk:
            raise RuntimeError("the warm `ars` interpreter's keeper went away")
        pending += chunk
    line, _, rest = bytes(pending).partition(b"\n")
    pending[:] = rest
    return line.decode()


def _read(path: str) -> str:
    """A captured stream as `text=True` decodes it: the locale's encoding, universal newlines."""
    with open(path, encoding=locale.getpreferredencoding(False), errors="strict") as handle:
        return handle.read()
