import uvicorn
from django.core.management.base import BaseCommand

from config.env import env_int, env_str


class Command(BaseCommand):
    help = "Serve the agent-memory MCP server (streamable HTTP at /mcp; world tokens as Bearer credentials)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=env_str("MCP_HOST") or "127.0.0.1")
        parser.add_argument("--port", type=int, default=env_int("MCP_PORT", 8001, minimum=1, maximum=65535))

    def handle(self, *args, host, port, **options):
        from config.web_protocol import HeaderDeadlineProtocol
        from config.web_server import HEADERS_MAX_BYTES
        from memory.agents.mcp_server import asgi_app

        self.stdout.write(f"MCP server at http://{host}:{port}/mcp")
        # One process, whatever WEB_CONCURRENCY says (uvicorn reads it, and refuses workers for an app object).
        # The site's HTTP protocol: headers bounded in size and time (config.web_protocol).
        uvicorn.run(
            asgi_app(port=port),
            host=host,
            port=port,
            log_level="warning",
            workers=1,
            http=HeaderDeadlineProtocol,
            h11_max_incomplete_event_size=HEADERS_MAX_BYTES,
        )
