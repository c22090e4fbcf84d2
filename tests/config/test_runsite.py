"""`make run`'s command, end to end: serve, Ctrl-C, nothing left running, restart keeps data."""

import http.cookiejar
import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

import psutil
import pytest
import redis

from config.embedded import postgres_pid, redis_pid
from tests.support.processes import ROOT, child_env, free_port, wait_for


class Site:
    def __init__(self, tmp_path, data_dir, port, name):
        self.port = port
        self.mcp_port = free_port()  # not the web port + 1: another test's server may hold that one
        self.log_path = tmp_path / f"{name}.log"
        env = child_env(
            DATA_DIR=str(data_dir),
            PORT=str(port),
            MCP_PORT=str(self.mcp_port),
            WEB_CONCURRENCY="1",
            WORKER_CONCURRENCY="1",
            DATABASE_URL=None,
            REDIS_URL=None,
            SECRET_KEY=None,
            FIELD_ENCRYPTION_KEYS=None,
            EVERLORE_EMBEDDED=None,
        )
        with open(self.log_path, "wb") as log:
            # Its own process group, like a terminal's foreground job.
            self.proc = subprocess.Popen(
                [sys.executable, "manage.py", "runsite"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def get(self, path):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except OSError:
            return None, b""

    def wait_healthy(self):
        def healthy():
            assert self.proc.poll() is None, f"runsite exited early:\n{self.output()[-4000:]}"
            return self.get("/healthz")[0] == 200

        wait_for(healthy, timeout=120, interval=0.5, what="the site's /healthz to answer 200")
        return self

    def ctrl_c(self):
        os.killpg(self.proc.pid, signal.SIGINT)
        return self.proc.wait(90)


def alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def admin_login(port, username, password) -> bool:
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    base = f"http://127.0.0.1:{port}"
    page = opener.open(f"{base}/admin/login/", timeout=10).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    form = urllib.parse.urlencode(
        {"username": username, "password": password, "csrfmiddlewaretoken": token, "next": "/admin/"}
    ).encode()
    request = urllib.request.Request(f"{base}/admin/login/", data=form, headers={"Referer": f"{base}/admin/login/"})
    landed = opener.open(request, timeout=10)
    return landed.geturl().rstrip("/").endswith("/admin") and "Log out" in landed.read().decode()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """One data directory for this module's sites: the first start makes it (initdb, migrations,
    the admin); the healing test then starts on data a site has already stopped with."""
    return tmp_path_factory.mktemp("site") / "data"


@pytest.mark.slow
def test_runsite_serves_stops_cleanly_on_ctrl_c_and_a_restart_finds_the_old_data(tmp_path, data_dir):
    port = free_port()

    first = Site(tmp_path, data_dir, port, "first").wait_healthy()
    assert f"running at http://127.0.0.1:{port}/" in first.output()
    created = re.search(r"Admin account created: username '(\w+)', password '([^']+)'", first.output())
    assert created, first.output()
    username, password = created.groups()
    assert first.get("/api/docs/")[0] == 200
    assert first.get("/static/admin/css/base.css")[0] == 200

    state = json.loads((data_dir / "redis" / "state.json").read_text())
    redis.Redis(port=state["port"], password=state["password"]).set("probe", "kept")
    started = [p.pid for p in psutil.Process(first.proc.pid).children(recursive=True)]
    started += [postgres_pid(data_dir), redis_pid(data_dir)]
    assert None not in started and len(started) >= 4

    assert first.ctrl_c() == 0, first.output()[-3000:]
    wait_for(lambda: not any(alive(pid) for pid in started), timeout=15, what="every process to stop")
    assert postgres_pid(data_dir) is None and redis_pid(data_dir) is None

    second = Site(tmp_path, data_dir, port, "second").wait_healthy()
    try:
        assert "Admin account created" not in second.output()
        assert admin_login(port, username, password), "the admin made on the first start must still log in"
        state = json.loads((data_dir / "redis" / "state.json").read_text())
        assert redis.Redis(port=state["port"], password=state["password"]).get("probe") == b"kept"
    finally:
        assert second.ctrl_c() == 0
    assert postgres_pid(data_dir) is None and redis_pid(data_dir) is None


def _child(site, word):
    """The pid of runsite's direct child whose command line holds ``word``."""
    for proc in psutil.Process(site.proc.pid).children():
        try:
            if any(word in part for part in proc.cmdline()):
                return proc.pid
        except psutil.Error:
            continue
    return None


def _listening(port):
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
def test_runsite_starts_again_whatever_dies_and_keeps_answering_meanwhile(tmp_path, data_dir):
    """kill -9 of the worker, the MCP server, the embedded Redis, the embedded PostgreSQL and the
    web server, one after another: each is started again by runsite (logged), Redis on its port
    with its data, and the site is healthy again after each; only Ctrl-C stops it."""
    import threading
    import time

    port = free_port()
    site = Site(tmp_path, data_dir, port, "healing").wait_healthy()
    probes: list = []
    probing = threading.Event()
    probing.set()

    def probe():
        while probing.is_set():
            probes.append(site.get("/healthz/live")[0])
            time.sleep(0.1)

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    try:

        def healthy_again(what, since=None):
            """/healthz answers 200 and, with ``since``, a worker has beaten since then (the old
            beat is not what makes it healthy)."""

            def healthy():
                status, body = site.get("/healthz")
                if status != 200:
                    return False
                age = json.loads(body)["worker"]["last_heartbeat_age_s"]
                return since is None or age < time.monotonic() - since - 0.2

            wait_for(healthy, timeout=90, interval=0.5, what=f"/healthz to answer 200 after {what}")
            assert site.proc.poll() is None, site.output()[-3000:]

        old, killed = _child(site, "celery"), time.monotonic()
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: (_child(site, "celery") or old) != old, timeout=30, what="a new worker")
        assert "The worker was killed by SIGKILL; starting it again in 1 s" in site.output()
        healthy_again("the worker's death", since=killed)

        old = _child(site, "runmcp")
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: (_child(site, "runmcp") or old) != old, timeout=30, what="a new MCP server")
        wait_for(lambda: _listening(site.mcp_port), timeout=60, what="the MCP port to listen again")
        assert "The MCP server was killed by SIGKILL" in site.output()

        state = json.loads((data_dir / "redis" / "state.json").read_text())
        kept = redis.Redis(port=state["port"], password=state["password"])
        kept.set("healing-probe", "kept-through-a-kill")
        redis_dir = data_dir / "redis"  # appendonly.aof (Redis 6) or appendonlydir/*.aof (7)
        wait_for(
            lambda: any(b"kept-through-a-kill" in f.read_bytes() for f in redis_dir.rglob("*.aof*") if f.is_file()),
            timeout=10,
            what="the key to reach the append-only file",
        )
        old, killed = redis_pid(data_dir), time.monotonic()
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: (redis_pid(data_dir) or old) != old, timeout=30, what="Redis to be started again")
        assert kept.get("healing-probe") == b"kept-through-a-kill", "the same port, the same password, the same data"
        assert "The embedded Redis died; starting it again" in site.output()
        healthy_again("Redis's death", since=killed)

        old = postgres_pid(data_dir)
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: (postgres_pid(data_dir) or old) != old, timeout=60, what="PostgreSQL to be started again")
        assert "The embedded PostgreSQL died" in site.output()
        healthy_again("PostgreSQL's death")

        probing.clear()
        prober.join(5)
        assert probes and None not in probes, "the web port answered throughout"
        assert set(probes) == {200}, sorted(set(probes), key=str)

        old = _child(site, "uvicorn")
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: (_child(site, "uvicorn") or old) != old, timeout=30, what="a new web server")
        healthy_again("the web server's death")
        assert site.output().count("is running again.") >= 5
    finally:
        probing.clear()
        started = [p.pid for p in psutil.Process(site.proc.pid).children(recursive=True)]
        assert site.ctrl_c() == 0, site.output()[-3000:]
    wait_for(lambda: not any(alive(pid) for pid in started), timeout=20, what="every process to stop")
    assert postgres_pid(data_dir) is None and redis_pid(data_dir) is None
