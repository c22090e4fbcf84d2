"""Events in, memories out: an event fans out to its actor, its target and
everyone nearby (each in their own words), in one transaction, under each
agent's capacity (least recently used go first) and the world's limit."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from config import jobs
from config.errors import Conflict, InvalidRequest
from memory.models import AGENT_MEMORY_TEXT_MAX, Agent, AgentMemory, World, WorldToken

EVENT_TEXT_MAX = 2000  # characters of an event's text
NEARBY_MAX = 50  # listeners / witnesses per event
BATCH_MAX = 500  # events per request
BATCH_MEMORIES_MAX = 2_500  # memories one request may write (events x everyone nearby); measured: 2.1 s on 2 cores
TEMPLATE_FIELDS = ("actor", "target", "location", "text", "type")
FUTURE_SLACK = timedelta(days=1)  # event times further ahead are refused
PASSIVE_KINDS = (AgentMemory.Kind.HEARD, AgentMemory.Kind.WITNESSED, AgentMemory.Kind.OBSERVATION)

# ---------------------------------------------------------------------------- events


@dataclass
class Event:
    type: str
    actor: str
    text: str
    location: str = ""
    target: str = ""
    nearby: list[str] = field(default_factory=list)
    time: datetime | None = None
    importance: float | None = None
    template: str = ""
    metadata: dict = field(default_factory=dict)


def template_check(template: str) -> str:
    """A custom event's template: text with {actor}, {target}, {location}, {text}
    or {type}, and nothing else: no attribute, index, conversion or format spec.
    Raises InvalidRequest naming what is not allowed."""
    import string

    allowed = ", ".join("{" + f + "}" for f in TEMPLATE_FIELDS)
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise InvalidRequest(f"template: {exc}; write braces as {{{{ and }}}}") from None
    for _, name, spec, conversion in parts:
        if name is None:
            continue
        if name not in TEMPLATE_FIELDS or spec or conversion:
            shown = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            raise InvalidRequest(f"template: {shown} is not allowed; use only {allowed}")
    return template


def events_allowance(*, world: World, token: WorldToken | None, count: int) -> None:
    """Count ``count`` events against the world's per-minute limit: every token of the world and
    its owner's own credentials share it (a fresh token is no way past it); RateLimited past it.
    ``token`` is who sent them (kept in the signature for the callers; the allowance is the world's)."""
    from stories import limits

    limits.world_events(world_id=world.pk, count=count)


def _world_room_check(world: World) -> None:
    """Raise Conflict when the world holds more memories than WORLD_MEMORIES_MAX
    (called inside the writing transaction, so the write rolls back)."""
    held = AgentMemory.objects.filter(world=world).count()
    if held > settings.WORLD_MEMORIES_MAX:
        raise Conflict(
            f"this world would hold {held:,} memories, over its limit of {settings.WORLD_MEMORIES_MAX:,}; "
            "nothing was stored: lower agent_capacity, or delete agents or memories"
        )


DEFAULT_IMPORTANCE = {"say": 0.5, "interact": 0.6, "observe": 0.4}


def memory_text(text: str) -> str:
    """``text`` as an agent memory holds it: one line, at most AGENT_MEMORY_TEXT_MAX characters."""
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= AGENT_MEMORY_TEXT_MAX else text[: AGENT_MEMORY_TEXT_MAX - 1] + "…"


def _names(text: str, name: str) -> bool:
    return bool(name) and re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text, re.IGNORECASE) is not None


def interaction_sentence(event: Event) -> str:
    """An interaction as one sentence: "Cy handed Bo a rusty lantern at the bridge."
    The actor leads unless the text already names them first; the target is added
    when the text does not name it; a place is "at <place>" ("the" before a lower-case one)."""
    text = event.text.strip().rstrip(".!?;, ")
    if not re.match(rf"{re.escape(event.actor)}(?!\w)", text, re.IGNORECASE):
        text = f"{event.actor} {text}"
    if event.target and not _names(text, event.target):
        ends_open = re.search(r"\s(to|with|at|for|from|on|into|toward|towards|about|of)$", text, re.IGNORECASE)
        text += f" {event.target}" if ends_open else f" (with {event.target})"
    place = event.location.strip()
    if place and not _names(text, place):
        article = "" if place[0].isupper() or re.match(r"(the|a|an|his|her|their|my|our)\s", place, re.I) else "the "
        text += f" at {article}{place}"
    return text[0].upper() + text[1:] + "."


# The date a memory of an event starts with ("(8 May 2023) "): the event time, which recall reads from
# occurred_at; measured on LoCoMo, embedding a memory without it finds more (docs/agent-memory.md).
_DATED = re.compile(r"^\(\d{1,2} [A-Z][a-z]+ \d{4}\) ")


def undated(content: str) -> str:
    """A memory's text without the date it starts with: what its vector means."""
    return _DATED.sub("", content, count=1)


def _fan_out(event: Event, now: datetime) -> list[tuple[str, dict]]:
    """(agent external id, memory fields) for everyone the event leaves a memory with."""
    at = f" at {event.location}" if event.location else ""
    when = event.time or now
    # A memory is read alone, much later: it carries its own date.
    dated = f"({when:%-d %B %Y}) "
    importance = event.importance if event.importance is not None else DEFAULT_IMPORTANCE.get(event.type, 0.5)
    base = {
        "location": event.location,
        "occurred_at": when,
        "importance": importance,
        "actor": event.actor,
        "metadata": {**event.metadata, "event": event.type},
    }
    others = [n for n in dict.fromkeys(event.nearby) if n and n != event.actor]
    out = []
    if event.type == "say":
        to = event.target or "everyone nearby"
        out.append(
            (
                event.actor,
                {
                    **base,
                    "kind": "say",
                    "partner": event.target,
                    "content": memory_text(f'{dated}{event.actor} said to {to}{at}: "{event.text}"'),
                },
            )
        )
        listeners = others + (
            [event.target] if event.target and event.target not in others and event.target != event.actor else []
        )
        for listener in listeners:
            out.append(
                (
                    listener,
                    {
                        **base,
                        "kind": "heard",
                        "partner": event.actor,
                        "content": memory_text(f'{dated}{event.actor} said to {to}{at}: "{event.text}"'),
                        "importance": importance * (1.0 if listener == event.target else 0.6),
                    },
                )
            )
    elif event.type == "interact":
        content = memory_text(dated + interaction_sentence(event))
        out.append((event.actor, {**base, "kind": "interaction", "partner": event.target, "content": content}))
        # The target takes part (created if new) whether or not it is listed nearby.
        present = others + (
            [event.target] if event.target and event.target not in others and event.target != event.actor else []
        )
        for witness in present:
            kind = "interaction" if witness == event.target else "witnessed"
            out.append(
                (
                    witness,
                    {
                        **base,
                        "kind": kind,
                        "partner": event.actor,
                        "content": content,
                        "importance": importance * (1.0 if kind == "interaction" else 0.5),
                    },
                )
            )
    elif event.type == "observe":
        out.append(
            (
                event.actor,
                {
                    **base,
                    "kind": "observation",
                    "partner": event.target,
                    "content": memory_text(f"{dated}{event.actor} noticed{at}: {event.text}"),
                },
            )
        )
    else:
        values = {"actor": event.actor, "target": event.target, "location": event.location, "text": event.text}
        content = template_check(event.template or "{actor} ({type}): {text}").format(**values, type=event.type)
        base["metadata"]["type"] = event.type
        content = dated + content
        out.append((event.actor, {**base, "kind": "custom", "partner": event.target, "content": memory_text(content)}))
        for witness in others:
            out.append(
                (
                    witness,
                    {
                        **base,
                        "kind": "witnessed",
                        "partner": event.actor,
                        "content": memory_text(content),
                        "importance": importance * 0.5,
                    },
                )
            )
    return out


def events_record(*, world: World, events: list[Event]) -> list[AgentMemory]:
    """Write the memories of ``events`` in one transaction (agents are created
    on first use), then hold every touched agent to the world's capacity."""
    now = timezone.now()
    for n, event in enumerate(events, start=1):
        if event.time and event.time > now + FUTURE_SLACK:
            raise InvalidRequest(f"event #{n}: its time is in the far future")
    rows = [(agent_id, fields) for event in events for agent_id, fields in _fan_out(event, now)]
    if len(rows) > BATCH_MEMORIES_MAX:
        raise InvalidRequest(
            f"these events would write {len(rows):,} memories (each listener and witness gets one); "
            f"at most {BATCH_MEMORIES_MAX:,} a request: send fewer events or fewer nearby agents"
        )
    with transaction.atomic():
        names = {agent_id for agent_id, _ in rows}
        existing = {a.external_id: a for a in Agent.objects.filter(world=world, external_id__in=names)}
        missing = [Agent(world=world, external_id=name, display_name=name) for name in names if name not in existing]
        Agent.objects.bulk_create(missing, ignore_conflicts=True)
        agents = {a.external_id: a for a in Agent.objects.filter(world=world, external_id__in=names)}
        created = AgentMemory.objects.bulk_create(
            [AgentMemory(agent=agents[agent_id], world=world, **fields) for agent_id, fields in rows]
        )
        for agent in agents.values():
            enforce_capacity(agent=agent, capacity=world.agent_capacity, keep_since=now)
        _world_room_check(world)
        for agent_id in sorted({m.agent_id for m in created}):
            jobs.agent_pass_after_commit(agent_id=agent_id)  # embeds and consolidates the new memories
    return created


def enforce_capacity(*, agent: Agent, capacity: int, keep_since: datetime | None = None) -> int:
    """Evict past ``capacity`` by least recent use: a memory's last use is when it
    was last retrieved, else when it happened. Folded-away sources go first;
    among equally stale ones the less important, then passive kinds (heard,
    witnessed, observed) go first. Pinned memories never go, and a memory written
    at or after ``keep_since`` (the batch being written now) goes only when the
    batch alone is over capacity (its oldest first), so a full bank always takes
    in what just happened."""
    excess = AgentMemory.objects.filter(agent=agent).count() - capacity
    if excess <= 0:
        return 0
    with connection.cursor() as cursor:
        cursor.execute(
            """
            DELETE FROM memory_agentmemory WHERE id IN (
              SELECT id FROM memory_agentmemory
              WHERE agent_id = %s AND NOT pinned
              ORDER BY (%s::timestamptz IS NOT NULL AND created_at >= %s), (consolidated_into_id IS NULL),
                       coalesce(last_retrieved_at, occurred_at), importance, (kind = ANY(%s)) DESC, id
              LIMIT %s)
            """,
            [agent.pk, keep_since, keep_since, list(PASSIVE_KINDS), excess],
        )
        return cursor.rowcount


def remember(
    *,
    world: World,
    agent: Agent,
    content: str,
    partner: str = "",
    location: str = "",
    importance: float = 0.7,
    pinned: bool = False,
) -> AgentMemory:
    """A memory the agent writes itself (the remember tool)."""
    now = timezone.now()
    with transaction.atomic():
        memory = AgentMemory.objects.create(
            agent=agent,
            world=world,
            kind=AgentMemory.Kind.NOTE,
            actor=agent.external_id,
            content=memory_text(content),
            partner=partner,
            location=location,
            importance=importance,
            pinned=pinned,
            occurred_at=now,
        )
        enforce_capacity(agent=agent, capacity=world.agent_capacity, keep_since=now)
        _world_room_check(world)
        jobs.agent_pass_after_commit(agent_id=agent.pk)
    return memory
