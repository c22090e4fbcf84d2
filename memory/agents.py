"""Memory for agents in multi-agent worlds: events in, memories out, scored
recall in one Postgres query, bounded growth, consolidation.

Decisions (documented in the README): an unknown agent in an event is created
on first use; a recall's default window is AGENT_RECALL["window_days"]; all
weights live in settings.AGENT_RECALL.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.http import Http404
from django.utils import timezone
from pgvector import HalfVector

from memory import embedder
from memory.vectors import vector_cursor
from memory.models import AGENT_MEMORY_TEXT_MAX, Agent, AgentMemory, World, WorldToken
from stories import tokens as token_counter
from stories.errors import InvalidRequest

EVENT_TEXT_MAX = 2000  # characters of an event's text
NEARBY_MAX = 50  # listeners / witnesses per event
BATCH_MAX = 500  # events per request
BATCH_MEMORIES_MAX = 2_500  # memories one request may write (events x everyone nearby); measured: 2.1 s on 2 cores
TEMPLATE_FIELDS = ("actor", "target", "location", "text", "type")
FUTURE_SLACK = timedelta(days=1)  # event times further ahead are refused
RECALL_LIMIT_MAX = 50
CANDIDATES_PER_RESULT = 4  # ranked rows fetched per requested memory, for dedupe and the token budget
TOKEN_PREFIX = "wt_"
PASSIVE_KINDS = (AgentMemory.Kind.HEARD, AgentMemory.Kind.WITNESSED, AgentMemory.Kind.OBSERVATION)
FINE_KINDS = ("say", "heard", "interaction", "witnessed", "observation", "custom")


# ---------------------------------------------------------------------------- worlds and tokens


def access_world(*, user_id: int | None, token: WorldToken | None, world_id: int) -> World:
    """The world if the caller owns it or holds a live token of it; Http404 otherwise."""
    world = World.objects.filter(pk=world_id).first()
    if world is None:
        raise Http404
    if token is not None:
        if token.world_id != world.pk:
            raise Http404
    elif world.owner_id != user_id:
        raise Http404
    return world


def token_create(*, world: World, name: str = "") -> tuple[WorldToken, str]:
    """A new token; the raw value is returned once and never stored."""
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = WorldToken.objects.create(world=world, name=name, key_hash=_hash(raw), prefix=raw[:10])
    return token, raw


def token_resolve(raw: str) -> WorldToken | None:
    """The live token for a raw value (None if unknown or revoked)."""
    token = WorldToken.objects.select_related("world__owner").filter(key_hash=_hash(raw), revoked_at__isnull=True).first()
    if token is not None and (token.last_used_at is None or timezone.now() - token.last_used_at > timedelta(minutes=1)):
        WorldToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
    return token


class TokenRefused(Exception):
    """A world token that may not act: unknown, revoked, or its owner suspended."""


def token_authenticate(raw: str) -> WorldToken:
    """The live token for ``raw`` whose owner may act now (stories.auth.account_active,
    the same rule as logins, sessions and API tokens). REST and MCP both ask here.
    Raises TokenRefused with the reason."""
    from stories.auth import account_active

    token = token_resolve(raw) if raw.startswith(TOKEN_PREFIX) else None
    if token is None:
        raise TokenRefused("unknown or revoked world token")
    if not account_active(token.world.owner):
        raise TokenRefused("the world's owner account is suspended")
    return token


def _hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def access_agent(*, world: World, external_id: str) -> Agent:
    agent = Agent.objects.filter(world=world, external_id=external_id).first()
    if agent is None:
        raise Http404
    return agent


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
    """Count ``count`` events against the per-minute limit of the token (or of the
    world, for its owner's own credentials); raises RateLimited past it."""
    from stories import limits

    limits.world_events(who=f"token-{token.pk}" if token is not None else f"world-{world.pk}", count=count)


def _world_room_check(world: World) -> None:
    """Raise Conflict when the world holds more memories than WORLD_MEMORIES_MAX
    (called inside the writing transaction, so the write rolls back)."""
    from stories.errors import Conflict

    held = AgentMemory.objects.filter(world=world).count()
    if held > settings.WORLD_MEMORIES_MAX:
        raise Conflict(f"this world would hold {held:,} memories, over its limit of {settings.WORLD_MEMORIES_MAX:,}; "
                       "nothing was stored: lower agent_capacity, or delete agents or memories")


DEFAULT_IMPORTANCE = {"say": 0.5, "interact": 0.6, "observe": 0.4}


def _clip(text: str) -> str:
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


def _fan_out(event: Event, now: datetime) -> list[tuple[str, dict]]:
    """(agent external id, memory fields) for everyone the event leaves a memory with."""
    at = f" at {event.location}" if event.location else ""
    when = event.time or now
    # A memory is read alone, much later: it carries its own date.
    dated = f"({when:%-d %B %Y}) "
    importance = event.importance if event.importance is not None else DEFAULT_IMPORTANCE.get(event.type, 0.5)
    base = {"location": event.location, "occurred_at": when, "importance": importance, "actor": event.actor,
            "metadata": {**event.metadata, "event": event.type}}
    others = [n for n in dict.fromkeys(event.nearby) if n and n != event.actor]
    out = []
    if event.type == "say":
        to = event.target or "everyone nearby"
        out.append((event.actor, {**base, "kind": "say", "partner": event.target,
                                  "content": _clip(f'{dated}{event.actor} said to {to}{at}: "{event.text}"')}))
        listeners = others + ([event.target] if event.target and event.target not in others and event.target != event.actor else [])
        for listener in listeners:
            out.append((listener, {**base, "kind": "heard", "partner": event.actor,
                                   "content": _clip(f'{dated}{event.actor} said to {to}{at}: "{event.text}"'),
                                   "importance": importance * (1.0 if listener == event.target else 0.6)}))
    elif event.type == "interact":
        content = _clip(dated + interaction_sentence(event))
        out.append((event.actor, {**base, "kind": "interaction", "partner": event.target, "content": content}))
        # The target takes part (created if new) whether or not it is listed nearby.
        present = others + ([event.target] if event.target and event.target not in others
                            and event.target != event.actor else [])
        for witness in present:
            kind = "interaction" if witness == event.target else "witnessed"
            out.append((witness, {**base, "kind": kind, "partner": event.actor, "content": content,
                                  "importance": importance * (1.0 if kind == "interaction" else 0.5)}))
    elif event.type == "observe":
        out.append((event.actor, {**base, "kind": "observation", "partner": event.target,
                                  "content": _clip(f"{dated}{event.actor} noticed{at}: {event.text}")}))
    else:
        values = {"actor": event.actor, "target": event.target, "location": event.location, "text": event.text}
        content = template_check(event.template or "{actor} ({type}): {text}").format(**values, type=event.type)
        base["metadata"]["type"] = event.type
        content = dated + content
        out.append((event.actor, {**base, "kind": "custom", "partner": event.target, "content": _clip(content)}))
        for witness in others:
            out.append((witness, {**base, "kind": "witnessed", "partner": event.actor, "content": _clip(content),
                                  "importance": importance * 0.5}))
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
        raise InvalidRequest(f"these events would write {len(rows):,} memories (each listener and witness gets one); "
                             f"at most {BATCH_MEMORIES_MAX:,} a request: send fewer events or fewer nearby agents")
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


# ---------------------------------------------------------------------------- recall


@dataclass
class Recalled:
    id: int
    content: str
    kind: str
    partner: str
    location: str
    occurred_at: datetime
    score: float
    parts: dict


# Hybrid search, in one query over the agent's candidates:
# - the full-text side is BM25 computed in SQL (a word counts once per memory:
#   memories are short), with document frequencies over this agent's
#   memories, so a word every memory holds, like the partner's name, counts
#   for nothing;
# - the vector side is pgvector cosine; the two rankings are fused by
#   reciprocal rank, so neither scale dominates;
# - a memory whose actor the query names ranks up ("what did Ann say ...");
# - a line of a conversation (said or heard) takes a share of the match of
#   the lines just before and after it with the same partner, within the
#   context window: an answer is found through the question it answers;
# - partner, location, kind, importance and recency add their weights.
_RECALL_SQL = """
WITH q AS (
  SELECT replace(plainto_tsquery('english', %(query)s)::text, '&', '|')::tsquery AS ts,
         tsvector_to_array(to_tsvector('english', %(query)s)) AS terms
), kw AS (
  SELECT key AS kind, value::float8 AS weight FROM jsonb_each_text(%(kind_weights)s::jsonb)
), named AS (
  SELECT coalesce(array_agg(external_id), '{}') AS ids FROM memory_agent
  WHERE world_id = %(world)s AND (lower(external_id) = ANY(%(words)s) OR lower(display_name) = ANY(%(words)s))
), base AS (
  SELECT m.id, m.kind, m.partner, m.location, m.occurred_at, m.importance, m.actor, m.search,
    CASE WHEN %(has_vector)s AND m.embedding_model = %(model)s
         THEN 1 - (m.embedding <=> %(vector)s::halfvec) END AS sim,
    %(has_text)s AND q.ts::text <> '' AND m.search @@ q.ts AS matches,
    greatest(length(m.search), 1)::float8 AS dl
  FROM memory_agentmemory m, q
  WHERE m.agent_id = %(agent)s AND m.consolidated_into_id IS NULL AND m.occurred_at >= %(since)s
    AND m.kind = ANY(%(kinds)s)
    AND (m.pinned OR m.last_retrieved_at IS NULL OR m.last_retrieved_at < %(cooled)s)
), stats AS (
  SELECT count(*)::float8 AS n, greatest(avg(dl)::float8, 1) AS avgdl FROM base
), terms AS (
  SELECT t, quote_literal(t)::tsquery AS tq FROM q, unnest(q.terms) AS t
), hits AS (
  SELECT b.id, b.dl, terms.t FROM base b, terms WHERE b.matches AND b.search @@ terms.tq
), df AS (
  SELECT t, count(*)::float8 AS df FROM hits GROUP BY t
), bm25 AS (
  SELECT h.id, sum(ln(1 + (s.n - df.df + 0.5) / (df.df + 0.5)) * (%(k1)s + 1)
                   / (1 + %(k1)s * (1 - %(b)s + %(b)s * h.dl / s.avgdl))) AS tr
  FROM hits h JOIN df USING (t), stats s
  GROUP BY h.id
), ranked AS (
  SELECT base.id, base.kind, base.partner, base.location, base.occurred_at, base.importance, base.actor, base.sim,
    coalesce(bm25.tr, 0) AS tr,
    rank() OVER (ORDER BY sim DESC NULLS LAST) AS r_vector,
    rank() OVER (ORDER BY coalesce(bm25.tr, 0) DESC) AS r_text
  FROM base LEFT JOIN bm25 USING (id)
), fused AS (
  SELECT ranked.*,
    CASE WHEN sim IS NOT NULL THEN %(w_vector)s * (%(rrf_k)s + 1) / (%(rrf_k)s + r_vector) ELSE 0 END AS s_vector,
    CASE WHEN tr > 0 THEN %(w_text)s * (%(rrf_k)s + 1) / (%(rrf_k)s + r_text) ELSE 0 END AS s_text,
    CASE WHEN actor <> '' AND actor = ANY(named.ids) THEN %(w_named)s ELSE 0 END AS s_named
  FROM ranked, named
), neighbours AS (
  SELECT fused.*,
    lag(occurred_at) OVER w AS prev_at, lag(s_vector + s_text + s_named) OVER w AS prev_match,
    lead(occurred_at) OVER w AS next_at, lead(s_vector + s_text + s_named) OVER w AS next_match
  FROM fused WINDOW w AS (PARTITION BY partner, kind IN ('say', 'heard') ORDER BY occurred_at, id)
), scored AS (
  SELECT id, n.kind, partner, location, occurred_at, s_vector, s_text, s_named,
    CASE WHEN %(partner)s <> '' AND partner = %(partner)s THEN %(w_partner)s ELSE 0 END AS s_partner,
    CASE WHEN %(location)s <> '' AND location = %(location)s THEN %(w_location)s ELSE 0 END AS s_location,
    %(prior)s * COALESCE(kw.weight, 0) AS s_kind,
    %(prior)s * %(w_importance)s * importance AS s_importance,
    %(prior)s * %(w_recency)s * power(0.5, greatest(extract(epoch FROM (%(now)s - occurred_at)), 0) / %(half_life)s)
      AS s_recency,
    CASE WHEN n.kind IN ('say', 'heard') THEN
      %(w_context)s * (CASE WHEN prev_at >= occurred_at - %(context_window)s THEN prev_match ELSE 0 END
                       + CASE WHEN next_at <= occurred_at + %(context_window)s THEN next_match ELSE 0 END)
    ELSE 0 END AS s_context
  FROM neighbours n LEFT JOIN kw ON kw.kind = n.kind
), top AS (
  SELECT *, s_partner + s_location + s_kind + s_importance + s_recency + s_vector + s_text + s_named + s_context
            AS total
  FROM scored ORDER BY total DESC, occurred_at DESC, id LIMIT %(candidates)s
)
SELECT top.id, m.content, top.kind, top.partner, top.location, top.occurred_at,
       s_partner, s_location, s_kind, s_importance, s_recency, s_vector, s_text, s_named, s_context
FROM top JOIN memory_agentmemory m ON m.id = top.id
ORDER BY total DESC, top.occurred_at DESC, top.id
"""


def _query_words(text: str) -> list[str]:
    """Words of a query that could be an agent's id or name ("Ann's" and "ann." name ann)."""
    words = set()
    for word in re.findall(r"[\w.@-]+", text.lower()):
        words.update({word, word.strip(".-@")})
    return sorted(w for w in words if w)


def _normal(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9']+", text.lower()))


def recall(*, world: World, agent: Agent, partner: str = "", location: str = "", query: str = "",
           since: datetime | None = None, kinds: list[str] | None = None, limit: int = 3,
           token_budget: int | None = None, cooldown_s: int | None = None, now: datetime | None = None,
           record: bool = True) -> tuple[list[Recalled], str]:
    """The memories that matter now, ranked in one SQL query, near-duplicates
    collapsed and cut to the token budget; returns them and a ready-to-inject
    "Relevant memories" block. Updates retrieval stats when ``record``."""
    conf = settings.AGENT_RECALL
    now = now or timezone.now()
    limit = max(1, min(limit, RECALL_LIMIT_MAX))
    if token_budget is None:
        token_budget = conf["token_budget"]
    cooldown = conf["cooldown_seconds"] if cooldown_s is None else cooldown_s
    vector, model = None, ""
    if query.strip():
        try:
            model, (vector,) = embedder.embed(user_id=world.owner_id, texts=[query])
        except embedder.EmbeddingUnavailable:
            vector = None
    params = {
        "partner": partner, "location": location, "query": query,
        "kind_weights": json.dumps(conf["kind_weights"]),
        "w_partner": conf["partner"], "w_location": conf["location"], "w_importance": conf["importance"],
        "w_recency": conf["recency"], "half_life": conf["recency_half_life_hours"] * 3600.0,
        "w_vector": conf["vector"], "w_text": conf["text"], "rrf_k": float(conf["rrf_k"]), "now": now,
        "prior": conf["prior_scale_with_query"] if query.strip() else 1.0,
        "has_vector": vector is not None, "model": model, "vector": HalfVector(vector) if vector is not None else None,
        "has_text": bool(query.strip()), "agent": agent.pk, "world": world.pk,
        "words": _query_words(query), "w_named": conf["named_actor"], "k1": conf["bm25_k1"], "b": conf["bm25_b"],
        "w_context": conf["context"], "context_window": timedelta(minutes=conf["context_window_minutes"]),
        "since": since or now - timedelta(days=conf["window_days"]),
        "kinds": kinds or [k for k in AgentMemory.Kind.values],
        "cooled": now - timedelta(seconds=cooldown), "candidates": limit * CANDIDATES_PER_RESULT,
    }
    with vector_cursor() as cursor:
        cursor.execute(_RECALL_SQL, params)
        rows = cursor.fetchall()
    kept: list[Recalled] = []
    seen: list[set[str]] = []
    used = 0
    for pk, content, kind, partner_, location_, occurred, *parts in rows:
        words = _normal(content)
        if any(len(words & other) / max(len(words | other), 1) >= conf["dedupe_jaccard"] for other in seen):
            continue
        cost = token_counter.count(content) + 8
        if used + cost > token_budget:
            continue
        names = ("partner", "location", "kind", "importance", "recency", "vector", "text", "named", "context")
        scored = {n: round(float(v), 4) for n, v in zip(names, parts)}
        kept.append(Recalled(pk, content, kind, partner_, location_, occurred, round(sum(scored.values()), 4), scored))
        seen.append(words)
        used += cost
        if len(kept) == limit:
            break
    if record and kept:
        AgentMemory.objects.filter(pk__in=[m.id for m in kept]).update(
            last_retrieved_at=now, retrieval_count=F("retrieval_count") + 1)
    block = ""
    if kept:
        lines = []
        for m in kept:
            where = f", {m.location}" if m.location else ""
            lines.append(f"- [{m.occurred_at:%Y-%m-%d %H:%M}{where}] {m.content}")
        block = "Relevant memories:\n" + "\n".join(lines)
    return kept, block


# ---------------------------------------------------------------------------- background: embed, consolidate


def embed_pending(*, agent_id: int, batch: int = 256) -> int:
    agent = Agent.objects.select_related("world").get(pk=agent_id)
    owner = agent.world.owner_id
    model = embedder.active_model(user_id=owner)
    pending = list(AgentMemory.objects.filter(agent=agent).exclude(embedding_model=model)
                   .order_by("id").values_list("pk", "content")[:batch])
    done = 0
    for start in range(0, len(pending), embedder.BATCH_MAX):
        chunk = pending[start:start + embedder.BATCH_MAX]
        name, vectors = embedder.embed(user_id=owner, texts=[c for _, c in chunk])
        for (pk, content), vector in zip(chunk, vectors):
            done += AgentMemory.objects.filter(pk=pk, content=content).update(
                embedding=HalfVector(vector), embedding_model=name)
    return done


def consolidate(*, agent_id: int, now: datetime | None = None) -> int:
    """Fold runs of fine-grained memories (same partner, or same location when
    there is no partner, within the window) into one summary memory; the
    originals stay, linked, and leave recall. Returns summaries written."""
    from memory import summarize
    from stories import accounts
    from stories.providers import ProviderError

    conf = settings.AGENT_CONSOLIDATION
    now = now or timezone.now()
    agent = Agent.objects.select_related("world").get(pk=agent_id)
    candidates = list(
        AgentMemory.objects.filter(agent=agent, consolidated_into__isnull=True, pinned=False, kind__in=FINE_KINDS,
                                   occurred_at__lte=now - timedelta(minutes=conf["settle_minutes"]))
        .order_by("partner", "location", "occurred_at")
    )
    groups: list[list[AgentMemory]] = []
    for memory in candidates:
        key = (memory.partner, "" if memory.partner else memory.location)
        last = groups[-1] if groups else None
        if (last and (last[0].partner, "" if last[0].partner else last[0].location) == key
                and memory.occurred_at - last[-1].occurred_at <= timedelta(minutes=conf["window_minutes"])):
            last.append(memory)
        else:
            groups.append([memory])
    conn = accounts.connection_for_background(user_id=agent.world.owner_id, purpose="summary")
    written = 0
    for group in groups:
        if len(group) < conf["min_run"]:
            continue
        text = "\n".join(m.content for m in group)
        try:
            summary = summarize.summarize_run(conn=conn, owner_id=agent.world.owner_id, agent=agent.external_id,
                                              text=text)
        except ProviderError:
            return written
        with transaction.atomic():
            ids = [m.pk for m in group]
            if AgentMemory.objects.filter(pk__in=ids, consolidated_into__isnull=True).count() != len(ids):
                continue  # another run folded some of them meanwhile
            first, last = group[0], group[-1]
            folded = AgentMemory.objects.create(
                agent=agent, world=agent.world, kind=AgentMemory.Kind.SUMMARY, partner=first.partner,
                actor=first.actor if len({m.actor for m in group}) == 1 else "",
                location=first.location if len({m.location for m in group}) == 1 else "",
                content=_clip(summary), occurred_at=last.occurred_at, importance=max(m.importance for m in group),
                metadata={"sources": len(group), "from": first.occurred_at.isoformat(), "to": last.occurred_at.isoformat()},
            )
            AgentMemory.objects.filter(pk__in=ids).update(consolidated_into=folded)
            written += 1
    return written


def remember(*, world: World, agent: Agent, content: str, partner: str = "", location: str = "",
             importance: float = 0.7, pinned: bool = False) -> AgentMemory:
    """A memory the agent writes itself (the remember tool)."""
    now = timezone.now()
    with transaction.atomic():
        memory = AgentMemory.objects.create(agent=agent, world=world, kind=AgentMemory.Kind.NOTE, actor=agent.external_id,
                                            content=_clip(content), partner=partner, location=location,
                                            importance=importance, pinned=pinned, occurred_at=now)
        enforce_capacity(agent=agent, capacity=world.agent_capacity, keep_since=now)
        _world_room_check(world)
    return memory


def agent_pass(*, agent_id: int) -> dict:
    """The per-agent background pass: embed new memories, then consolidate."""
    if not Agent.objects.filter(pk=agent_id).exists():
        return {"embedded": 0, "summaries": 0}
    try:
        embedded = embed_pending(agent_id=agent_id)
    except embedder.EmbeddingUnavailable:
        embedded = 0
    return {"embedded": embedded, "summaries": consolidate(agent_id=agent_id)}


# ---------------------------------------------------------------------------- export

_EXPORT_FIELDS = ("id", "kind", "partner", "location", "content", "metadata", "importance", "pinned",
                  "occurred_at", "created_at", "last_retrieved_at", "retrieval_count", "consolidated_into_id")


def world_export_chunks(*, world: World, chunk: int = 2000):
    """The world as JSON text, in pieces: agents in order, each with its memories
    (oldest first). Two queries in all (agents, then one server-side cursor over
    the memories), and at most ``chunk`` rows held at once."""
    from django.core.serializers.json import DjangoJSONEncoder

    encode = DjangoJSONEncoder(ensure_ascii=False).encode
    yield '{"world": ' + encode({"id": world.pk, "name": world.name}) + ', "agents": ['
    agents = list(Agent.objects.filter(world=world).order_by("external_id", "id")
                  .values_list("id", "external_id", "display_name"))
    memories = (AgentMemory.objects.filter(world=world)
                .order_by("agent__external_id", "agent_id", "occurred_at", "id")
                .values_list("agent_id", *_EXPORT_FIELDS).iterator(chunk_size=chunk))
    pending = next(memories, None)
    for n, (agent_id, external_id, display_name) in enumerate(agents):
        head = encode({"external_id": external_id, "display_name": display_name})[:-1]
        parts = [("," if n else "") + head + ', "memories": [']
        first = True
        while pending is not None and pending[0] == agent_id:
            row = dict(zip(_EXPORT_FIELDS, pending[1:]))
            row["consolidated_into"] = row.pop("consolidated_into_id")
            parts.append(("" if first else ",") + encode(row))
            first = False
            if len(parts) >= 200:
                yield "".join(parts)
                parts = []
            pending = next(memories, None)
        parts.append("]}")
        yield "".join(parts)
    yield "]}"
