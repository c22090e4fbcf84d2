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

STARTED: list = []  # every site a test started: one a failed test left running is stopped after it


@pytest.fixture(autouse=True)
def _stop_leftovers():
    yield
    while STARTED:
        site = STARTED.pop()
        if site.proc.poll() is None:
            site.ctrl_c()


class Site:
    def __init__(self, tmp_path, data_dir, port, name, **extra_env):
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
            **{
                "DEMO_ENDPOINT_URL": None,  # runsite's own demo model: the local one, its stand-in here
                "LOCAL_MODEL": None,
                **extra_env,
            },
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
        STARTED.append(self)

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

    def api(self, method, path, token=None, body=None):
        """(status, JSON) of an API call, as a player's client makes it."""
        headers = {"Content-Type": "application/json", **({"Authorization": f"Token {token}"} if token else {})}
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", data=data, headers=headers, method=method
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

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


@pytest.mark.slow
def test_runsite_serves_stops_on_ctrl_c_restarts_on_its_old_data_and_starts_again_whatever_dies(tmp_path):
    data_dir, port = tmp_path / "data", free_port()

    # the demo model stands in for the local one, and "builds" on this first start until told it is built
    first = Site(tmp_path, data_dir, port, "first", LOCAL_MODEL_STANDIN_PREPARE_S="300").wait_healthy()
    assert f"running at http://127.0.0.1:{port}/" in first.output()
    status, signed = first.api("POST", "/api/auth/signup/", body={"username": "newcomer", "password": "a long pass 42"})
    assert status == 201, signed
    token = signed["token"]
    status, demo = first.api("GET", "/api/settings/demo/", token)
    assert (status, demo["available"], demo["local"], demo["state"]) == (200, True, True, "preparing"), demo
    assert "being built for this machine" in demo["message"]
    status, adventure = first.api("POST", "/api/adventures/", token, {"title": "First", "opening": "Rain on the inn."})
    assert status == 201, adventure
    turn = f"/api/adventures/{adventure['id']}/turns/"
    status, refused = first.api("POST", turn, token, {"mode": "do", "text": "I knock on the door"})
    assert status == 424 and "being built for this machine" in refused["detail"], (status, refused)
    assert "your action was kept" in refused["hint"]
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

    # its build ends: the model joins, and the newcomer's turn is played by it (its stand-in's words)
    (data_dir / "local-model" / "standin-built").touch()
    wait_for(
        lambda: first.api("GET", "/api/settings/demo/", token)[1]["state"] == "ready",
        timeout=90,
        interval=0.5,
        what="the demo model to be ready",
    )
    status, played = first.api("POST", f"/api/adventures/{adventure['id']}/retry/", token, {})
    assert status == 201, played
    assert "lantern light trembles" in played["actions"][-1]["text"], played
    assert played["usage"]["demo"] is True and played["usage"]["model"] == "gemma-3-270m"

    assert first.ctrl_c() == 0, first.output()[-3000:]
    wait_for(lambda: not any(alive(pid) for pid in started), timeout=15, what="every process to stop")
    assert postgres_pid(data_dir) is None and redis_pid(data_dir) is None

    # started again on the data it stopped with (one start serves both: each costs seconds of a core)
    second = Site(tmp_path, data_dir, port, "second").wait_healthy()
    assert "Admin account created" not in second.output()
    assert admin_login(port, username, password), "the admin made on the first start must still log in"
    state = json.loads((data_dir / "redis" / "state.json").read_text())
    assert redis.Redis(port=state["port"], password=state["password"]).get("probe") == b"kept"
    _starts_again_whatever_dies(second, data_dir)


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


def _starts_again_whatever_dies(site, data_dir):
    """kill -9 of the worker, the demo model, the MCP server, the embedded Redis, the embedded
    PostgreSQL and the web server, one after another: each is started again by runsite (logged),
    Redis on its port with its data, and the site is healthy again after each; only Ctrl-C stops it."""
    import threading
    import time

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

        old, killed = _child(site, "worker@%h"), time.monotonic()
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: (_child(site, "worker@%h") or old) != old, timeout=30, what="a new worker")
        assert "The worker was killed by SIGKILL; starting it again in 1 s" in site.output()
        healthy_again("the worker's death", since=killed)

        old = _child(site, "passes@%h")  # the worker of the post-turn passes (threads)
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: (_child(site, "passes@%h") or old) != old, timeout=30, what="a new pass worker")
        assert "The pass worker was killed by SIGKILL" in site.output()

        old = _child(site, "runmodel")
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: (_child(site, "runmodel") or old) != old, timeout=30, what="a new demo model")
        assert "The local demo model was killed by SIGKILL" in site.output()

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
