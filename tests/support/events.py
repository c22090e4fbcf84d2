"""Server-sent events in tests: the whole streamed body from Django's test client, and its events."""

import json

from asgiref.sync import async_to_sync


def streamed(response) -> bytes:
    """The whole body of a streamed answer from Django's test client."""

    async def collect(content):
        return [part async for part in content]

    return b"".join(async_to_sync(collect)(response.streaming_content))


def parse_events(raw: bytes) -> list[tuple[str, dict]]:
    events = []
    for block in raw.decode().split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        fields = dict(line.split(": ", 1) for line in lines)
        events.append((fields["event"], json.loads(fields["data"])))
    return events
