"""runsite's supervisor: a part that keeps dying is started again after 1, 2, 4 ... 30 s, a part
that stayed up a minute starts from 1 s again, a part that cannot start is tried again later, and
a real child process that dies is seen, reaped with its group and started again."""

import sys

from config.supervisor import BACKOFF_MAX_S, STABLE_S, ChildProcess, Part, Supervisor
from tests.support.processes import wait_for


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_a_part_that_keeps_dying_waits_longer_each_time_and_a_stable_one_starts_over():
    clock, said, alive, starts = Clock(), [], {"up": False}, []
    part = Part(
        "worker",
        start=lambda: (starts.append(clock.now), alive.update(up=True)),
        running=lambda: alive["up"],
        describe=lambda: "was killed by SIGKILL",
    )
    supervisor = Supervisor([part], said.append, clock=clock)
    supervisor.start_all()
    delays = []
    for _ in range(7):
        alive["up"] = False  # it dies at once after every start
        supervisor.tick()
        delays.append(part.due - clock.now)
        clock.now = part.due
        supervisor.tick()
        assert alive["up"], "started again when its time came"
    assert delays == [1, 2, 4, 8, 16, BACKOFF_MAX_S, BACKOFF_MAX_S]
    assert said[0] == "The worker was killed by SIGKILL; starting it again in 1 s (restart 1 in a row)."
    assert said[1] == "The worker is running again."

    clock.now += STABLE_S  # up a minute: recovered
    alive["up"] = False
    supervisor.tick()
    assert part.due - clock.now == 1


def test_a_part_that_cannot_start_is_tried_again_later_and_the_others_go_on():
    clock, said = Clock(), []
    tries = {"n": 0}

    def start():
        tries["n"] += 1
        if tries["n"] < 3:
            raise RuntimeError("port 6379 is busy\nmore detail")

    redis = Part("embedded Redis", start=start, running=lambda: tries["n"] >= 3, describe=lambda: "died")
    redis.started_at = clock.now
    web = Part("web server", start=lambda: None, running=lambda: True)
    supervisor = Supervisor([redis, web], said.append, clock=clock)
    tries["n"] = 0
    supervisor.tick()  # found dead
    for _ in range(3):
        clock.now = redis.due or clock.now
        supervisor.tick()
    assert tries["n"] == 3 and redis.running()
    assert "The embedded Redis did not start (port 6379 is busy); trying again in 2 s." in said
    assert said[-1] == "The embedded Redis is running again."


def test_a_real_child_that_dies_is_reaped_and_started_again():
    child = ChildProcess([sys.executable, "-c", "import sys, time; time.sleep(0.2); sys.exit(3)"])
    said = []
    part = Part(
        "MCP server", start=child.start, running=child.running, describe=child.describe, cleanup=child.reap_group
    )
    supervisor = Supervisor([part], said.append)
    supervisor.start_all()
    first = child.proc.pid
    wait_for(lambda: (supervisor.tick(), part.due is not None)[1], timeout=10, what="the death to be seen")
    assert said[0].startswith("The MCP server exited with code 3; starting it again in 1 s")
    wait_for(lambda: (supervisor.tick(), child.proc.pid != first)[1], timeout=10, what="a new child")
    child.stop(5)
    assert not child.running()
