"""The memory engine's tables: memories hanging off story nodes, and the cursors."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.db.models import F, Func, Q
from pgvector.django import HalfVectorField

from stories.models import Action, Adventure, Branch, StoryCard
from stories.providers.endpoint import EMBEDDING_DIMS_MAX  # noqa: F401 (checked where every vector comes in)

MEMORY_TEXT_MAX = 1000  # characters in one memory (hand-written or generated)


class Memory(models.Model):
    """One short memory. It hangs off a story node (branch, depth): the last
    action of the block it summarizes, or the head when a player wrote it. The
    lineage clause that reads a path's actions reads its memories too, so a
    fork inherits its ancestors' memories up to the fork and no others."""

    adventure = models.ForeignKey(Adventure, on_delete=models.CASCADE, related_name="memories")
    branch = models.ForeignKey(Branch, on_delete=models.CASCADE, related_name="memories")
    depth = models.PositiveIntegerField()
    source_start = models.PositiveIntegerField(null=True, blank=True)  # empty for hand-written memories
    source_end = models.PositiveIntegerField(null=True, blank=True)
    text = models.TextField()
    # Vectors are ranked by an exact scan after the btree on the adventure: for
    # banks up to ~10k an exact scan beats HNSW and keeps recall exact. halfvec
    # halves the bytes per dimension and STORAGE PLAIN (migration 0002) keeps it
    # inline instead of TOASTed: measured ~2.7x faster than TOASTed vector(1536)
    # with the same top-5 in 299/300 queries. No fixed dimension: each model has
    # its own, and recall only compares vectors of the active model.
    embedding = HalfVectorField(null=True, blank=True)
    embedding_model = models.CharField(max_length=200, blank=True, default="")
    pinned = models.BooleanField(default=False)
    forgotten = models.BooleanField(default=False)  # evicted or forgotten by the player; kept and restorable
    stale = models.BooleanField(default=False)  # an action of its block was edited after it was written
    # The player wrote this text by hand (an edit of a written memory): no pass rewrites it.
    edited = models.BooleanField(default=False)
    offline = models.BooleanField(default=False)  # written by the offline extractive summarizer
    # Whose memory: empty for the adventure's own bank (the story as the protagonist lives it), else a
    # character card of the cast, remembering only the scenes it was in (memory.story.cast).
    character = models.ForeignKey(StoryCard, on_delete=models.CASCADE, null=True, blank=True, related_name="memories")
    kind = models.CharField(max_length=12, blank=True, default="")  # a character's: say, heard, interaction, witnessed
    importance = models.FloatField(default=0.5)  # 0..1; ranks a character's memories (memory.story.retrieval)
    # a character may hold several memories of one block (the offline writer keeps everything it
    # witnessed, 50 words a memory): their order, 0 first
    part = models.PositiveSmallIntegerField(default=0, db_default=0)  # (raw inserts, e.g. bench COPY, get 0)
    # the memory of a secret (stories.party.secrets): the user ids whose turns may recall it; None: all
    seen_by = ArrayField(models.IntegerField(), null=True, blank=True)
    use_count = models.PositiveIntegerField(default=0)
    last_used_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "memories"
        constraints = [
            # one memory per block, holder (the bank's own, or one character's) and part, so a pass
            # that runs twice writes nothing twice
            models.UniqueConstraint(
                fields=["adventure", "branch", "source_start", "character", "part", "seen_by"],
                condition=Q(source_start__isnull=False),
                name="one_memory_per_block",
                nulls_distinct=False,
            ),
        ]
        indexes = [models.Index(fields=["adventure", "branch", "depth"])]

    def __str__(self) -> str:
        return self.text[:60]

    @property
    def hand_written(self) -> bool:
        return self.source_start is None


class Cursor(models.Model):
    """How far the post-turn pass got on an adventure: each mark is the node
    (branch, depth) of the last action that pass covered; depth 0 = nothing.
    A mark moves only in the transaction that stores what it covered
    (memory.story.marks.mark_move, compare-and-set on the old value)."""

    adventure = models.OneToOneField(Adventure, on_delete=models.CASCADE, related_name="memory_cursor")
    memory_branch = models.ForeignKey(Branch, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    memory_depth = models.PositiveIntegerField(default=0)
    summary_branch = models.ForeignKey(Branch, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    summary_depth = models.PositiveIntegerField(default=0)
    # The summary as the player last wrote it; rewrites start from it, offline
    # rewrites keep it verbatim.
    summary_base = models.TextField(blank=True, default="")
    summary_written_at = models.DateTimeField(null=True, blank=True)
    # Consecutive passes that ended with a model error; the sweeper backs off on them.
    failures = models.PositiveIntegerField(default=0)
    last_error = models.CharField(max_length=500, blank=True, default="")
    last_error_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"cursor of {self.adventure_id}: memories {self.memory_depth}, summary {self.summary_depth}"


class CastMark(models.Model):
    """How far the cast backfill (memory.story.steps.backfill) has read the story for one character
    card of the cast: blocks up to ``depth`` were considered. Gone when the card leaves the cast, so
    a card that rejoins is read again from the start."""

    card = models.OneToOneField(StoryCard, on_delete=models.CASCADE, related_name="+")
    depth = models.PositiveIntegerField(default=0)
    # blocks remembered after this were written with the member in the cast: nothing to backfill
    created_at = models.DateTimeField(auto_now_add=True)


class PassRun(models.Model):
    """One run of the post-turn pass, for operators (and the proof that passes
    of one adventure never overlap)."""

    adventure = models.ForeignKey(Adventure, on_delete=models.CASCADE, related_name="pass_runs")
    worker = models.CharField(max_length=200, blank=True, default="")
    started_at = models.DateTimeField(auto_now_add=True, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=20, blank=True, default="running")  # ok, errors, crashed
    memories_created = models.PositiveIntegerField(default=0)
    summary_written = models.BooleanField(default=False)
    embedded = models.PositiveIntegerField(default=0)
    evicted = models.PositiveIntegerField(default=0)
    errors = models.TextField(blank=True, default="")

    class Meta:
        indexes = [models.Index(fields=["adventure", "started_at"])]

    def __str__(self) -> str:
        return f"pass of {self.adventure_id} at {self.started_at:%H:%M:%S}: {self.outcome}"


# ---------------------------------------------------------------------------- multi-agent worlds

AGENT_MEMORY_TEXT_MAX = 1000  # characters in one agent memory


class World(models.Model):
    """A multi-agent world, owned by a user; agents reach it with world tokens."""

    owner = models.ForeignKey("auth.User", on_delete=models.CASCADE, related_name="worlds")
    name = models.CharField(max_length=200)
    agent_capacity = models.PositiveIntegerField(default=2000)  # memories kept per agent
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class WorldToken(models.Model):
    """An API token for one world. Only its SHA-256 is stored; revoked tokens are refused."""

    world = models.ForeignKey(World, on_delete=models.CASCADE, related_name="tokens")
    name = models.CharField(max_length=100, blank=True, default="")
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12)  # shown to the owner to tell tokens apart
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.world})"


class Agent(models.Model):
    world = models.ForeignKey(World, on_delete=models.CASCADE, related_name="agents")
    external_id = models.CharField(max_length=100)  # the agent's id in the builder's world
    display_name = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["world", "external_id"], name="one_agent_per_external_id")]

    def __str__(self) -> str:
        return self.display_name or self.external_id


class AgentMemory(models.Model):
    class Kind(models.TextChoices):
        SAY = "say"  # what the agent said
        HEARD = "heard"  # what it heard another agent say
        INTERACTION = "interaction"  # what it did to or with another agent
        WITNESSED = "witnessed"  # what it saw others do nearby
        OBSERVATION = "observation"  # what it noticed
        NOTE = "note"  # written by the agent itself (the remember tool)
        CUSTOM = "custom"  # a builder-defined event type (its name in metadata.type)
        SUMMARY = "summary"  # a consolidation of several fine-grained memories

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="memories")
    world = models.ForeignKey(World, on_delete=models.CASCADE, related_name="+")
    partner = models.CharField(max_length=100, blank=True, default="")
    # who said or did it (the agent itself for its own acts); a query naming them ranks it up
    actor = models.CharField(max_length=100, blank=True, default="")
    location = models.CharField(max_length=200, blank=True, default="")
    kind = models.CharField(max_length=12, choices=Kind.choices)
    content = models.TextField()
    metadata = models.JSONField(default=dict, blank=True)
    search = models.GeneratedField(
        expression=SearchVector("content", config="english"), output_field=SearchVectorField(), db_persist=True
    )
    embedding = HalfVectorField(null=True, blank=True)  # see Memory.embedding
    embedding_model = models.CharField(max_length=200, blank=True, default="")
    importance = models.FloatField(default=0.5)  # 0..1
    pinned = models.BooleanField(default=False)
    occurred_at = models.DateTimeField()  # world time of the event
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    last_retrieved_at = models.DateTimeField(null=True, blank=True)
    retrieval_count = models.PositiveIntegerField(default=0)
    consolidated_into = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="sources"
    )
    # how its fact keys (AgentMemoryKey) were made: "" not yet (the agent's pass makes them), "offline"
    # or "model" (memory.agents.fact_keys)
    keys_made = models.CharField(max_length=8, blank=True, default="", db_default="")

    class Meta:
        verbose_name_plural = "agent memories"
        indexes = [
            models.Index(fields=["agent", "occurred_at"]),
            GinIndex(fields=["search"], name="agentmemory_search_gin"),
            # the candidate path's newest-first arms (memory.agents.agent_recall); its HNSW indexes are
            # expression indexes made in migration 0008
            models.Index(fields=["agent", "partner", "occurred_at"], name="agentmemory_partner_newest"),
            models.Index(fields=["agent", "location", "occurred_at"], name="agentmemory_location_newest"),
            # a uniform sample of an agent's memories in a fixed random order (the candidate path's BM25
            # statistics)
            models.Index(F("agent"), Func(F("id"), function="hashint8"), name="agentmemory_sample"),
        ]

    def __str__(self) -> str:
        return f"{self.kind}: {self.content[:50]}"


class AgentMemoryKey(models.Model):
    """A short fact one agent memory states, said plainly with who it is about ("Caroline: Caroline went
    to a LGBTQ support group yesterday."): recall matches a question against a memory and its keys and
    returns the memory (memory.agents.agent_recall_sql). Made by the agent's pass (memory.agents.fact_keys),
    with the owner's model when the world has one, else offline; goes with its memory and is made anew
    when the memory's text changes."""

    memory = models.ForeignKey(AgentMemory, on_delete=models.CASCADE, related_name="keys")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")  # the memory's (recall's filter)
    text = models.TextField()
    embedding = HalfVectorField(null=True, blank=True)  # see Memory.embedding
    embedding_model = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        verbose_name_plural = "agent memory keys"

    def __str__(self) -> str:
        return self.text[:60]


class AgentWordSample(models.Model):
    """BM25's word statistics of a uniform sample of one agent's memories of some kinds (the candidate
    path of a large bank's recall), shared by every process: memory.agents.agent_words."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    kinds = models.CharField(max_length=200)  # the kinds sampled, sorted, comma-separated
    sample_size = models.PositiveIntegerField()  # the sample asked for (AGENT_RECALL["stats_sample"])
    held = models.BigIntegerField()  # the bank's size (as recall counts it) when the sample was taken
    n = models.PositiveIntegerField()  # memories in the sample
    avgdl = models.FloatField()  # their mean length in distinct words
    taken_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "kinds", "sample_size"], name="one_word_sample")]


class AgentWordCount(models.Model):
    """In how many of a sample's memories one word is."""

    sample = models.ForeignKey(AgentWordSample, on_delete=models.CASCADE, related_name="+")
    term = models.TextField()
    df = models.PositiveIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["sample", "term"], name="one_count_per_word")]


class SummarySnapshot(models.Model):
    """The story summary as it stood at one story node (branch, depth): the
    node it covers up to, as a memory hangs off the last node of its block. A
    path's summary is its newest snapshot (memory.story.summaries); ``player`` marks
    the player's own text, which no pass or tree change loses."""

    adventure = models.ForeignKey(Adventure, on_delete=models.CASCADE, related_name="summary_snapshots")
    branch = models.ForeignKey(Branch, on_delete=models.CASCADE, related_name="summary_snapshots")
    depth = models.PositiveIntegerField()
    text = models.TextField()
    player = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["adventure", "branch", "depth"], name="one_summary_per_node")]

    def __str__(self) -> str:
        return self.text[:60]


class CanonText(models.Model):
    """One version of an adventure's plot essentials or author's note, made at a story node: the
    live action at the tip when it was written (``at_root``: before the story, true on every path).
    It is true down every path through that node, while that take is the live one
    (memory.story.canon); a node undone away leaves it in the history, with no node."""

    adventure = models.ForeignKey(Adventure, on_delete=models.CASCADE, related_name="canon_texts")
    field = models.CharField(max_length=20)  # plot_essentials or authors_note
    action = models.ForeignKey(Action, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    at_root = models.BooleanField(default=False)
    text = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["adventure", "field"], name="canon_text_adventure_field")]

    def __str__(self) -> str:
        return f"{self.field}: {self.text[:60]}"


class CardVersion(models.Model):
    """One version of a story card, made at a story node as a ``CanonText`` is: its fields as the
    player left them there (``fields``), or its removal (``deleted``). A card with versions is on a
    path only where the newest of them on it is not a removal (memory.story.canon)."""

    adventure = models.ForeignKey(Adventure, on_delete=models.CASCADE, related_name="card_versions")
    card = models.ForeignKey(StoryCard, on_delete=models.CASCADE, related_name="versions")
    action = models.ForeignKey(Action, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    at_root = models.BooleanField(default=False)
    fields = models.JSONField(default=dict)
    deleted = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["adventure", "card"], name="card_version_adventure_card")]


class CardClaim(models.Model):
    """What the story says changed about a card (memory.story.claims): a slot (status, whereabouts,
    role, allegiance, holdings, relations, alias), its value and a short sentence, read from the
    action that is its evidence. It hangs off that action as a card version does: true down the
    paths through it while that take is live and not hidden. On a path, a later claim of the same
    card, slot and topic (the item held, the other party) supersedes it; the player's text, never."""

    class State(models.TextChoices):
        APPLIED = "applied"  # told to the model beside the card's text
        PROPOSED = "proposed"  # waiting for the player (the adventure's claims_review)
        REJECTED = "rejected"  # never told, never proposed again from this evidence
        ACCEPTED = "accepted"  # merged into the card's text by the player (a card version)

    adventure = models.ForeignKey(Adventure, on_delete=models.CASCADE, related_name="card_claims")
    card = models.ForeignKey(StoryCard, on_delete=models.CASCADE, related_name="claims")
    action = models.ForeignKey(Action, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    slot = models.CharField(max_length=12)
    topic = models.CharField(max_length=100, blank=True, default="")
    value = models.CharField(max_length=200)
    text = models.CharField(max_length=400)
    state = models.CharField(max_length=10, choices=State.choices, default=State.APPLIED)
    offline = models.BooleanField(default=True)  # read by the offline reader, not the owner's model
    edited = models.BooleanField(default=False)  # the player's edit: no reading replaces it
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["adventure", "card"], name="card_claim_adventure_card")]


class CardProposal(models.Model):
    """A name the story keeps using (acting or spoken to) that no card has: proposed as a card, with
    the actions that are its evidence (one per block; memory.story.claims counts those on the path)."""

    class State(models.TextChoices):
        PROPOSED = "proposed"
        ACCEPTED = "accepted"
        REJECTED = "rejected"

    adventure = models.ForeignKey(Adventure, on_delete=models.CASCADE, related_name="card_proposals")
    name = models.CharField(max_length=100)
    type = models.CharField(max_length=20, default="character")
    keys = models.JSONField(default=list)
    evidence = models.JSONField(default=list)  # action ids, at most PROPOSAL_EVIDENCE_MAX
    state = models.CharField(max_length=10, choices=State.choices, default=State.PROPOSED)
    card = models.ForeignKey(StoryCard, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["adventure", "name"], name="card_proposal_name")]
