"""The MCP server as its own process, and an MCP SDK client session against it."""

import socket
import subprocess
import sys

import pytest

from tests.support.processes import ROOT, child_database_url, child_env, free_port, stop_process, wait_for


class McpServer(str):
    """The server's URL, with its log (the whole run's: a traceback anywhere in it is a bug)."""

    def __new__(cls, url: str, log_path):
        server = super().__new__(cls, url)
        server.log_path = log_path
        return server

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture(scope="session")
def mcp_server(django_db_setup, tmp_path_factory):
    """One MCP server for a test process's whole run (its tests each bring their own rows; a flush
    between them leaves its pooled connections idle): starting one costs seconds of a core."""
    tmp_path = tmp_path_factory.mktemp("mcp")
    port = free_port()
    log = open(tmp_path / "mcp.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "runmcp", "--port", str(port)],
        cwd=ROOT,
        env=child_env(DATABASE_URL=child_database_url(), REQUEST_HEADER_TIMEOUT="2"),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    def listening():
        assert proc.poll() is None, (tmp_path / "mcp.log").read_text()
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    wait_for(listening, timeout=60, what="the MCP server")
    yield McpServer(f"http://127.0.0.1:{port}/mcp", tmp_path / "mcp.log")
    stop_process(proc)
    log.close()


async def session_calls(url, token, calls):
    """[sorted tool names, result of each (name, arguments) call] in one client session."""
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    results = []
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = await session.list_tools()
                results.append(sorted(t.name for t in tools.tools))
                for name, arguments in calls:
                    results.append(await session.call_tool(name, arguments))
    return results
