"""What keeps a one-machine site up: `make run` (runsite) supervises what it started.

Each part is a ``Part``: the web server, the worker and the MCP server (child processes), and the
embedded Redis and PostgreSQL (servers runsite started). A part that dies is started again after a
backoff (1 s, doubling to 30 s while it keeps dying, back to 1 s once it has stayed up a minute),
each death and each restart logged in one line; the other parts keep serving meanwhile (a request
that needs a part that is down answers 503, the sweeper catches up the memory work). Only Ctrl-C
or SIGTERM stops the site.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable

BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0
STABLE_S = 60.0  # a part up this long has recovered: its next death restarts it after BACKOFF_FIRST_S


class Part:
    """One supervised thing: ``start()`` it, ask ``running()``, ``describe()`` how it ended,
    ``cleanup()`` what a death left behind."""

    def __init__(
        self,
        name: str,
        *,
        start: Callable[[], None],
        running: Callable[[], bool],
        describe: Callable[[], str] = lambda: "stopped",
        cleanup: Callable[[], None] = lambda: None,
    ):
        self.name, self._start, self.running, self.describe = name, start, running, describe
        self.cleanup = cleanup  # after a death, before the restart
        self.started_at = 0.0
        self.quick_deaths = 0
        self.due: float | None = None  # when a dead part is started again

    def start(self, now: float) -> None:
        self._start()
        self.started_at = now
        self.due = None


class ChildProcess:
    """A child process in its own session (Ctrl-C reaches only runsite, which stops it in order)."""

    def __init__(self, cmd: list[str], nice: int = 0):
        self.cmd, self.nice = cmd, nice
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            self.cmd,
            env=os.environ.copy(),
            start_new_session=True,
            preexec_fn=(lambda: os.nice(self.nice)) if self.nice else None,
        )

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def describe(self) -> str:
        code = self.proc.returncode if self.proc is not None else None
        if code is not None and code < 0:
            try:
                return f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"was killed by signal {-code}"
        return f"exited with code {code}"

    def reap_group(self) -> None:
        """What the dead child left in its process group (a worker's pool processes, the web
        server's workers still holding the port) goes with it."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def stop(self, timeout: float) -> None:
        if not self.running():
            self.reap_group()
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        self.reap_group()
        self.proc.wait()


class Supervisor:
    """Runs ``tick`` until asked to stop; restarts dead parts with a backoff; ``say`` logs a line."""

    def __init__(self, parts: list[Part], say: Callable[[str], None], clock: Callable[[], float] = time.monotonic):
        self.parts, self.say, self.clock = parts, say, clock

    def start_all(self) -> None:
        for part in self.parts:
            part.start(self.clock())

    def tick(self) -> None:
        now = self.clock()
        for part in self.parts:
            if part.due is None:
                if part.running():
                    continue
                if now - part.started_at >= STABLE_S:
                    part.quick_deaths = 0
                delay = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2**part.quick_deaths)
                part.quick_deaths += 1
                part.due = now + delay
                part.cleanup()
                self.say(
                    f"The {part.name} {part.describe()}; starting it again in {delay:g} s "
                    f"(restart {part.quick_deaths} in a row)."
                )
            elif now >= part.due:
                try:
                    part.start(now)
                except Exception as exc:  # a server that cannot start yet: try again later
                    delay = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2**part.quick_deaths)
                    part.quick_deaths += 1
                    part.due = now + delay
                    self.say(
                        f"The {part.name} did not start ({str(exc).splitlines()[0][:200]}); "
                        f"trying again in {delay:g} s."
                    )
                else:
                    self.say(f"The {part.name} is running again.")
