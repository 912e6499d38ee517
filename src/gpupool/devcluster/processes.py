"""Child processes of a local control plane: start with a log file, wait until ready, stop.

Each process writes to its own log in the cluster folder, so a failed start can say why (the
last lines of the log go into the error). Stopping sends SIGTERM and, after a grace period,
SIGKILL; ``kill()`` is the SIGKILL the crash tests need. On Linux the children are also told
to die with their parent (``PR_SET_PDEATHSIG``), so a test run or a dev cluster that is itself
SIGKILLed leaves no etcd or kube-apiserver behind. The kernel ties that signal to the thread
that started the child, so it is set only for children started from the main thread.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

STOP_GRACE_SECONDS = 10.0


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _tie_to_parent() -> Callable[[], None] | None:
    """The ``preexec_fn`` that ties a child's life to this process, where that is safe."""
    if sys.platform == "linux" and threading.current_thread() is threading.main_thread():
        return _die_with_parent
    return None


class StartsAndStops:
    """``with thing:`` starts it and stops it, however the block ends."""

    def start(self) -> None:
        """Start (subclasses)."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop (subclasses)."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class StartError(RuntimeError):
    """A control-plane process exited or did not become ready in time."""


def kill_until_gone(find: Callable[[], set[int]], where: str, timeout: float = 10.0) -> set[int]:
    """SIGKILL every PID ``find`` returns, again, until it returns none; returns those killed.

    For processes this one did not start (containerd's shims, containers' processes), found by
    where they are rather than by name, so nothing else on the machine is touched.

    Raises:
        TimeoutError: Some were still there after ``timeout`` seconds (the message lists them
            and says ``where``).
    """
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while pids := find():
        for pid in pids - killed:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            killed.add(pid)
        if time.monotonic() > deadline:
            raise TimeoutError(f"processes left in {where}: {sorted(pids)}")
        time.sleep(0.05)
    return killed


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ManagedProcess:
    """One child process with its log file.

    Args:
        name: Short name for messages (``etcd``, ``kube-apiserver``...).
        argv: Command line.
        log_path: Where stdout and stderr go.
    """

    def __init__(self, name: str, argv: Sequence[str], log_path: Path) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.process = subprocess.Popen(
            self.argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_tie_to_parent(),
        )

    @property
    def running(self) -> bool:
        """Whether the process has not exited."""
        return self.process.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the log, for error messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready(self, probe: Callable[[], bool], timeout: float) -> None:
        """Poll ``probe`` until it returns True.

        Raises:
            StartError: The process exited, or ``timeout`` seconds passed.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                raise StartError(
                    f"{self.name} exited with {self.process.returncode}:\n{self.log_tail()}"
                )
            if probe():
                return
            time.sleep(0.1)
        raise StartError(f"{self.name} not ready after {timeout:.0f} s:\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a grace period; idempotent."""
        if self.running:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()

    def kill(self) -> None:
        """SIGKILL now, reap, close the log; idempotent."""
        if self.running:
            self.process.kill()
            self.process.wait()
        self._log.close()
