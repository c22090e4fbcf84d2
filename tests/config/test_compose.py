"""docker-compose.yml cannot run here (no Docker engine); check what it would run exists."""

import importlib
import re
import shlex

import pytest
import yaml
from django.core.management import get_commands

from tests.support.processes import ROOT

COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
APP_SERVICES = ["migrate", "web", "worker", "passes", "beat", "mcp"]


def command_words(service: dict) -> list[list[str]]:
    """Each shell command a service runs, as words (sh -c strings split on &&)."""
    cmd = service.get("command") or []
    if isinstance(cmd, str):
        cmd = shlex.split(cmd)
    if cmd[:2] == ["sh", "-c"]:
        return [shlex.split(part) for part in re.split(r"&&|;", cmd[2])]
    return [cmd]


def healthcheck_words(service: dict) -> list[str]:
    test = service["healthcheck"]["test"]
    return test[1:] if test[0] == "CMD" else shlex.split(test[1])


def check_runnable(words: list[str]) -> None:
    program = words[0]
    if program == "python" and words[1] == "manage.py":
        assert words[2] in get_commands(), f"manage.py has no command {words[2]!r}"
    elif program == "python" and words[1] == "-c":
        compile(words[2], "<healthcheck>", "exec")
    elif program == "python" and words[1:3] == ["-m", "uvicorn"]:
        module, attr = words[3].split(":")
        assert callable(getattr(importlib.import_module(module), attr))
    elif program == "celery":
        app_module = words[words.index("-A") + 1]
        app = getattr(importlib.import_module(app_module), "celery_app")
        assert app.main == "everlore"
        assert words[words.index("-A") + 2] in {"worker", "beat"}
    elif program in {"redis-server", "redis-cli", "pg_isready"}:
        pass  # provided by the official images
    else:
        pytest.fail(f"unexpected program in docker-compose.yml: {program}")


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_service_has_a_healthcheck_whose_command_exists(name):
    service = SERVICES[name]
    assert "healthcheck" in service, f"{name} has no healthcheck"
    check_runnable(healthcheck_words(service))


@pytest.mark.parametrize("name", APP_SERVICES)
def test_app_service_commands_exist_in_the_project(name):
    for words in command_words(SERVICES[name]):
        check_runnable(words)


def test_app_services_get_every_required_setting():
    for name in APP_SERVICES:
        env = SERVICES[name]["environment"]
        for var in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "FIELD_ENCRYPTION_KEYS", "ALLOWED_HOSTS"):
            assert var in env, f"{name} lacks {var}"
        assert env["DATABASE_URL"].startswith("postgres://") and "@db:5432/" in env["DATABASE_URL"]
        assert env["REDIS_URL"] == "redis://redis:6379/0"
        assert env["ALLOW_PRIVATE_ENDPOINTS"].endswith("false}") or env["ALLOW_PRIVATE_ENDPOINTS"] == "false"
        assert env["DEBUG"] == "false"


def test_the_web_service_runs_the_same_server_as_make_run():
    from config.web_server import web_server_argv

    assert SERVICES["web"]["command"] == web_server_argv(host="0.0.0.0", port=8000, workers=3, executable="python")
    assert "DB_POOL_SIZE" in SERVICES["web"]["environment"], "the web pool is sized in the compose file"


def test_redis_is_append_only_and_never_evicts_jobs():
    cmd = SERVICES["redis"]["command"]
    assert cmd[cmd.index("--appendonly") + 1] == "yes"
    assert cmd[cmd.index("--maxmemory-policy") + 1] == "noeviction"


def test_database_is_pgvector_and_data_lives_in_volumes():
    assert SERVICES["db"]["image"].startswith("pgvector/pgvector:")
    assert any(v.startswith("pgdata:") for v in SERVICES["db"]["volumes"])
    assert any(v.startswith("redisdata:") for v in SERVICES["redis"]["volumes"])


def test_exactly_one_beat_runs_the_periodic_sweeper():
    from django.conf import settings

    assert "workers.sweep" in {job["task"] for job in settings.CELERY_BEAT_SCHEDULE.values()}
    beat = SERVICES["beat"]
    assert beat["command"][:4] == ["celery", "-A", "config", "beat"]
    assert "deploy" not in beat or beat["deploy"].get("replicas", 1) == 1


def test_workers_can_be_scaled_out():
    for name in ("worker", "passes"):
        worker = SERVICES[name]
        assert "container_name" not in worker and "ports" not in worker, f"`--scale {name}=4` needs neither"
        assert worker["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert SERVICES["web"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def test_every_queue_has_its_workers_as_make_run_starts_them():
    """The passes (config.celery) on a worker of threads, as runsite's; imports and the probe on one of
    processes: a queue no service takes would hold its jobs for ever."""
    from config.celery import QUEUES
    from config.management.commands.runsite import pass_worker_argv

    def option(command, name):
        return command[command.index(name) + 1]

    passes, worker = SERVICES["passes"]["command"], SERVICES["worker"]["command"]
    expected = pass_worker_argv(threads=16, executable="python")[3:]  # after `python -m celery`
    assert option(passes, "--pool") == option(expected, "--pool") == "threads"
    assert option(passes, "--queues") == option(expected, "--queues")
    assert {option(passes, "--queues"), option(worker, "--queues")} == set(QUEUES)


def test_dockerfile_installs_requirements_and_collects_static():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "pip install --no-cache-dir -r requirements.txt" in dockerfile
    assert "--no-deps -r requirements-nodeps.txt" in dockerfile
    assert "collectstatic" in dockerfile
    assert re.search(r"^USER app$", dockerfile, re.M), "the image must not run as root"


def test_dockerfile_collectstatic_step_runs_with_its_placeholder_settings(tmp_path):
    import subprocess
    import sys

    from tests.support.processes import child_env

    dockerfile = (ROOT / "Dockerfile").read_text()
    step = re.search(r"RUN (DATABASE_URL=.*?collectstatic[^\n]*)", dockerfile, re.S).group(1)
    assignments = dict(re.findall(r"([A-Z_]+)=(\S+)", step.split("python manage.py")[0]))
    env = child_env(
        **assignments, STATIC_ROOT=str(tmp_path / "static"), EVERLORE_EMBEDDED=None, DATA_DIR=str(tmp_path / "data")
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "--verbosity", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "static" / "admin" / "css" / "base.css").exists()
    assert not (tmp_path / "data").exists(), "the build must not start embedded servers"


def test_check_deploy_is_clean_with_the_compose_production_settings(tmp_path):
    """`manage.py check --deploy` with the environment compose gives the app (defaults
    taken, required secrets supplied) reports nothing unsilenced."""
    import secrets
    import subprocess
    import sys

    from tests.support.processes import child_env

    given = {
        "SECRET_KEY": secrets.token_urlsafe(50),
        "FIELD_ENCRYPTION_KEYS": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        "ALLOWED_HOSTS": "stories.example.com",
    }

    def resolve(value):
        def one(match):
            name, op, rest = match.group(1), match.group(2), match.group(3)
            return given.get(name, rest if op == ":-" else "x")

        return re.sub(r"\$\{(\w+)(:-|:\?)([^}]*)\}", one, str(value))

    env = {k: resolve(v) for k, v in SERVICES["web"]["environment"].items()}
    assert env["HTTPS"] == "true" and env["DEBUG"] == "false"
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=child_env(**env, EVERLORE_EMBEDDED=None, DATA_DIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout
