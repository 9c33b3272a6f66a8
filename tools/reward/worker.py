"""A second process for reward profiling: forked once, before anything is read, it runs jobs
this process hands it (read the second halves of the files; later, write the second half of
the profile) while this one does the other half.

Forked early on purpose: a fork's child starts with its parent's pages, and resident-set
figures count them in both, so forking a parent that already holds a collection would double
its apparent memory. Jobs and results travel through a pipe as a pickle whose numpy arrays
go out of band (protocol 5), each sent as it is, not copied into the pickle.

A job is a module-level function and its arguments. A BadInput it raises comes back as a
BadInput (one line, exit code 2); anything else as a RuntimeError naming the job. While it runs,
a job and this process may exchange small messages (`Worker.tell` and `Worker.hear` here,
`parent()` there): writing the profile passes the file offset back and forth that way.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import pickle
import signal
from collections.abc import Callable
from typing import Any

from autoresearch_skills.errors import BadInput


def cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class Worker:
    """One forked process running one job at a time: `submit`, then `result`."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("fork")
        self._connection, theirs = context.Pipe(duplex=True)
        self._process = context.Process(target=_serve, args=(theirs,), daemon=True)
        self._process.start()
        theirs.close()
        self._busy = False

    def submit(self, job: Callable[..., Any], *args: Any) -> None:
        self._send((job, args))
        self._busy = True

    def result(self) -> Any:
        status, value = self._receive()
        if status == MESSAGE:
            raise RuntimeError("the second process of ars profile sent a message nobody heard")
        return self._outcome(status, value)

    def tell(self, value: Any) -> None:
        """A message to the running job (`parent().hear()` there)."""
        self._send((MESSAGE, value))

    def hear(self) -> Any:
        """The running job's next message (`parent().tell()` there). A job that ended instead
        raises its error here, or a RuntimeError if it ended well without the message."""
        status, value = self._receive()
        if status == MESSAGE:
            return value
        self._outcome(status, value)
        raise RuntimeError("the second process of ars profile ended its job before its message")

    def _send(self, value: Any) -> None:
        try:
            send(self._connection, value)
        except OSError:
            raise RuntimeError("the second process of ars profile ended before it was done") from None

    def _receive(self) -> tuple[str, Any]:
        try:
            return receive(self._connection)
        except EOFError:
            raise RuntimeError("the second process of ars profile ended without its result") from None

    def _outcome(self, status: str, value: Any) -> Any:
        self._busy = False
        if status == "bad input":
            raise BadInput(value)
        if status == "error":
            raise RuntimeError(value)
        return value

    def close(self) -> None:
        """Stop the process; one still busy with a job (after an error here) is ended. Closing
        twice is closing once."""
        if self._connection.closed:
            return
        if self._busy:
            self._process.terminate()
        elif self._process.is_alive():
            with contextlib.suppress(OSError):  # it is gone already
                send(self._connection, None)
        self._process.join()
        self._connection.close()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


MESSAGE = "message"  # what tags a message between a running job and the parent


class _Parent:
    """The parent, as a running job sees it."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection

    def tell(self, value: Any) -> None:
        """A message to the parent (`Worker.hear` there)."""
        send(self._connection, (MESSAGE, value))

    def hear(self) -> Any:
        """The parent's next message (`Worker.tell` there)."""
        status, value = receive(self._connection)
        assert status == MESSAGE, status
        return value


_parent: _Parent | None = None


def parent() -> _Parent:
    """The process that submitted the running job; only a job in the worker may ask."""
    assert _parent is not None, "parent() is for a job running in the worker"
    return _parent


def _serve(connection: Any) -> None:
    global _parent
    # This process's end is this process's business: Ctrl-C reaches the parent, which stops it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _parent = _Parent(connection)
    while True:
        try:
            job = receive(connection)
        except EOFError:
            return
        if job is None:
            return
        if job[0] == MESSAGE:  # for a job that ended first, with an error the parent now hears
            continue
        function, args = job
        outcome: tuple[str, Any]
        try:
            outcome = ("ok", function(*args))
        except BadInput as err:
            outcome = ("bad input", err.format_message())
        except Exception as err:  # anything else: the job's name and the error's gist
            outcome = ("error", f"{function.__name__}: {err!r}")
        send(connection, outcome)
        del outcome  # let a job's arrays go before waiting for the next one
        release_memory()


def release_memory() -> None:
    """Give the C heap's free memory back to the system: freed blocks of a finished job would
    otherwise stay resident (glibc keeps them for reuse), counted against this process."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        ctypes.CDLL(None).malloc_trim(0)


def send(connection: Any, value: Any) -> None:
    """`value` pickled, its numpy arrays after the pickle as raw bytes, written as they are."""
    buffers: list[pickle.PickleBuffer] = []
    header = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    raws = [buffer.raw() for buffer in buffers]
    connection.send_bytes(pickle.dumps([raw.nbytes for raw in raws]))
    connection.send_bytes(header)
    handle = connection.fileno()
    for raw in raws:
        done = 0
        while done < raw.nbytes:
            done += os.write(handle, raw[done:])


def receive(connection: Any) -> Any:
    """What `send` sent; each array's bytes read straight into a buffer of its own (multiprocessing's
    own reads would copy them twice more)."""
    import numpy as np

    sizes = pickle.loads(connection.recv_bytes())
    header = connection.recv_bytes()
    handle = connection.fileno()
    buffers = []
    for size in sizes:
        buffer = np.empty(size, np.uint8)
        with buffer.data as view:
            done = 0
            while done < size:
                got = os.readv(handle, [view[done:]])
                if got == 0:
                    raise EOFError
                done += got
        buffers.append(buffer)
    return pickle.loads(header, buffers=buffers)
