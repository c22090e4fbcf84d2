"""The story domain's tables. Rules live in tree.py, lineage.py, settings.py and turns.py."""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.db.models import Q

from stories.party.models import ReportStatus

ACTION_TEXT_MAX = 4000  # characters in one action (player or model)
TITLE_MAX = 200  # characters
LONG_TEXT_MAX = 10_000  # characters in plot essentials, summary, instructions, persona description
AUTHORS_NOTE_MAX = 1000  # characters
CARD_ENTRY_MAX = 4000  # characters in a story card's entry
CARD_KEYS_MAX = 20  # trigger keys per card
CARD_KEY_MAX = 80  # characters per trigger key
CARDS_PER_ADVENTURE_MAX = 500


class Rating(models.TextChoices):  # a scenario's content rating, in order: a preference shows it and those below
    EVERYONE = "everyone"
    TEEN = "teen"
    MATURE = "mature"


RATING_ORDER = [Rating.EVERYONE, Rating.TEEN, Rating.MATURE]


class AISettings(models.Model):
    """One user's model connection and budgets. The key is stored encrypted (stories.accounts.crypto), never shown."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="ai_settings")
    # validated by stories.providers.netguard (scheme, credentials, public address), not by URLField
    endpoint_url = models.CharField(max_length=500, blank=True, default="")
    api_key_encrypted = models.TextField(blank=True, default="")
    api_key_last4 = models.CharField(max_length=4, blank=True, default="")
    # The endpoint (scheme://host:port) the key was entered for: a key is sent there and nowhere else.
    api_key_origin = models.CharField(max_length=600, blank=True, default="")
    model = models.CharField(max_length=200, blank=True, default="")
    summary_model = models.CharField(max_length=200, blank=True, default="")
    embedding_model = models.CharField(max_length=200, blank=True, default="")
    context_tokens = models.PositiveIntegerField(default=4096)
    max_output_tokens = models.PositiveIntegerField(default=300)
    temperature = models.FloatField(default=0.8)
    # sampling beyond temperature (stories.prompt.sampling): empty is not sent
    top_p = models.FloatField(null=True, blank=True)
    top_k = models.PositiveIntegerField(null=True, blank=True)
    min_p = models.FloatField(null=True, blank=True)
    frequency_penalty = models.FloatField(null=True, blank=True)
    presence_penalty = models.FloatField(null=True, blank=True)
    repetition_penalty = models.FloatField(null=True, blank=True)
    stop = models.JSONField(default=list, blank=True)  # up to 4 strings that end a reply
    reasoning_max_tokens = models.PositiveIntegerField(default=0)
    # the highest scenario rating the library shows this player (models.Rating)
    content_rating = models.CharField(max_length=10, choices=Rating.choices, default=Rating.TEEN)
    memory_top_k = models.PositiveSmallIntegerField(default=5)
    memory_bank_capacity = models.PositiveIntegerField(default=80)
    # the player's persona: a new adventure, a card's or a scenario's {{user}}, takes it unless given its own
    persona_name = models.CharField(max_length=100, blank=True, default="")
    persona_pronouns = models.CharField(max_length=40, blank=True, default="")
    persona_description = models.TextField(blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "AI settings"
        verbose_name_plural = "AI settings"

    def __str__(self) -> str:
        return f"AI settings of {self.user}"

    @property
    def has_api_key(self) -> bool:
        return bool(self.api_key_encrypted)


class Adventure(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="adventures")
    title = models.CharField(max_length=TITLE_MAX)
    persona_name = models.CharField(max_length=100, blank=True, default="")
    persona_pronouns = models.CharField(max_length=40, blank=True, default="")
    persona_description = models.TextField(blank=True, default="")
    plot_essentials = models.TextField(blank=True, default="")
    authors_note = models.TextField(blank=True, default="")
    ai_instructions = models.TextField(blank=True, default="")
    story_summary = models.TextField(blank=True, default="")
    auto_summarize = models.BooleanField(default=True)
    memory_bank_enabled = models.BooleanField(default=True)
    claims_review = models.BooleanField(default=False)  # what the story changes on cards waits for the player
    # the prompt's older order: memories, what characters know and cards before the story (stories.prompt.context)
    memories_before_story = models.BooleanField(default=False)
    # this adventure's own model and sampling preset (stories.prompt.sampling.PRESETS); blank: the player's
    model = models.CharField(max_length=200, blank=True, default="")
    sampling_preset = models.CharField(max_length=40, blank=True, default="")
    hidden = models.BooleanField(default=False)  # by a moderator: seen only by staff, no memory work
    # where its setup came from (a copy: a new version or a deleted scenario changes nothing here)
    scenario = models.ForeignKey("Scenario", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    scenario_version = models.ForeignKey(
        "ScenarioVersion", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # where play continues (its depth: head_branch.tip_depth)
    head_branch = models.ForeignKey("Branch", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    # A reply being written holds the story until then (stories.tree.generation): one at a time.
    generation_token = models.CharField(max_length=32, blank=True, default="")
    generation_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["owner", "-updated_at"])]

    def __str__(self) -> str:
        return self.title


class Branch(models.Model):
    """A line of play. It owns the actions placed on it (depth > fork_depth) and borrows its ancestors':
    ``lineage`` lists [branch_id, read_to_depth] for each, newest first. Only stories.tree.writes writes it."""

    adventure = models.ForeignKey(Adventure, on_delete=models.CASCADE, related_name="branches")
    parent = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="children")
    fork_depth = models.PositiveIntegerField(default=0)
    lineage = models.JSONField(default=list, blank=True)
    tip_depth = models.PositiveIntegerField(default=0)  # depth of the newest node on this branch's path
    name = models.CharField(max_length=100, blank=True, default="")
    # A segment: a frozen copy of nodes other branches read after their source was rewritten; never shown as a branch
    internal = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "branches"
        indexes = [models.Index(fields=["adventure", "internal"])]

    def __str__(self) -> str:
        return self.name or f"branch {self.pk}"


class Action(models.Model):
    class Kind(models.TextChoices):
        START = "start"
        DO = "do"
        SAY = "say"
        STORY = "story"
        CONTINUE = "continue"
        AI = "ai"

    MODEL_KINDS = (Kind.AI, Kind.CONTINUE)

    adventure = models.ForeignKey(Adventure, on_delete=models.CASCADE, related_name="actions")
    branch = models.ForeignKey(Branch, on_delete=models.CASCADE, related_name="actions")
    depth = models.PositiveIntegerField()
    kind = models.CharField(max_length=10, choices=Kind.choices)
    text = models.TextField()
    live = models.BooleanField(default=True)  # the selected take at this node
    hidden = models.BooleanField(default=False)  # by a moderator: out of the story, prompts and memories
    created_at = models.DateTimeField(auto_now_add=True)
    edited_at = models.DateTimeField(null=True, blank=True)
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    actor = models.CharField(max_length=100, blank=True, default="")  # a member's turn: their character's name
    # a secret (stories.party.secrets): the user ids who may read it, and the characters in earshot; None: all
    seen_by = ArrayField(models.IntegerField(), null=True, blank=True)
    heard_by = ArrayField(models.CharField(max_length=100), null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["branch", "depth"], condition=Q(live=True), name="one_live_take_per_node")
        ]
        indexes = [models.Index(fields=["branch", "depth"])]

    def __str__(self) -> str:
        return f"{self.kind}@{self.depth}: {self.text[:40]}"

    @property
    def is_model_output(self) -> bool:
        return self.kind in self.MODEL_KINDS


class RedoTurn(models.Model):
    """A turn undo took from the end of a branch, which redo brings back while the branch has not changed
    since (stories.tree.writes). ``nodes``: each node's kind, text and whether a moderator hid it, oldest first."""

    branch = models.ForeignKey(Branch, on_delete=models.CASCADE, related_name="+")
    from_depth = models.PositiveIntegerField()  # the depth of the turn's first node
    nodes = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["branch", "-id"])]


class PresentCards(models.Manager):
    def get_queryset(self):  # the cards on the path played (memory.story.canon); ``every``: the others too
        return super().get_queryset().filter(present=True)


class StoryCard(models.Model):
    class Type(models.TextChoices):
        CHARACTER = "character"
        PLACE = "place"
        ITEM = "item"
        FACTION = "faction"
        OTHER = "other"

    class SelectiveLogic(models.TextChoices):  # with secondary keys: a key AND any of them, AND NOT all, ...
        AND_ANY, NOT_ALL, NOT_ANY, AND_ALL = "and_any", "not_all", "not_any", "and_all"

    class Position(models.TextChoices):  # where a triggered card is told (stories.prompt.triggers)
        WORLD_INFO, BEFORE_STORY, AT_DEPTH = "world_info", "before_story", "at_depth"

    adventure = models.ForeignKey(Adventure, on_delete=models.CASCADE, related_name="cards")
    type = models.CharField(max_length=10, choices=Type.choices, default=Type.OTHER)
    name = models.CharField(max_length=100)
    keys = models.JSONField(default=list, blank=True)  # trigger words, matched whole-word, case-insensitive
    entry = models.TextField(blank=True, default="")
    notes = models.TextField(blank=True, default="")
    # A character card in the cast keeps its own memories of the scenes it is in (memory.story.cast);
    # the flag means nothing on other card types.
    in_cast = models.BooleanField(default=True)
    secondary_keys = models.JSONField(default=list, blank=True)
    selective_logic = models.CharField(max_length=8, choices=SelectiveLogic.choices, default=SelectiveLogic.AND_ANY)
    position = models.CharField(max_length=12, choices=Position.choices, default=Position.WORLD_INFO)
    depth = models.PositiveSmallIntegerField(default=4)  # at_depth: actions from the newest
    probability = models.PositiveSmallIntegerField(default=100)  # percent of the turns it is triggered on
    prevent_recursion = models.BooleanField(default=True)  # its entry triggers no other card
    exclude_recursion = models.BooleanField(default=False)  # no other card's entry triggers it
    examples = models.TextField(blank=True, default="")  # a character's example dialogue
    present = models.BooleanField(default=True)  # on the path played: its versions say (memory.story.canon)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = PresentCards()
    every = models.Manager()

    class Meta:
        ordering = ["id"]
        base_manager_name = "every"  # a memory's character resolves on any path

    def __str__(self) -> str:
        return self.name


class ProviderCall(models.Model):
    """One call to a model endpoint, for the user's debug log. Never holds a key."""

    class Purpose(models.TextChoices):
        TURN = "turn"
        TEST = "test"
        MEMORY = "memory"
        SUMMARY = "summary"
        EMBEDDING = "embedding"
        AGENT = "agent"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="provider_calls")
    adventure = models.ForeignKey(Adventure, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    purpose = models.CharField(max_length=12, choices=Purpose.choices)
    endpoint_host = models.CharField(max_length=255, blank=True, default="")
    model = models.CharField(max_length=200, blank=True, default="")
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    cached_tokens = models.PositiveIntegerField(default=0)  # of the prompt, served from the endpoint's prefix cache
    # a turn's prompt as stories.prompt.prefix keeps it: the next turn says how much of it it repeats
    prompt_fingerprint = models.BinaryField(default=b"", editable=False)
    latency_ms = models.PositiveIntegerField(default=0)
    outcome = models.CharField(max_length=20)  # ok, or the ProviderError code
    error = models.CharField(max_length=500, blank=True, default="")
    demo = models.BooleanField(default=False)  # spent the shared demo model
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:  # the user's log; the adventure's last turn
        indexes = [models.Index(fields=f.split()) for f in ("user -created_at", "adventure purpose -created_at")]

    def __str__(self) -> str:
        return f"{self.purpose} {self.model} {self.outcome}"


class ImportJob(models.Model):
    """An adventure import the player asked for: the document waits here until a worker imports it (play.imports),
    then the job says how it went (the adventure, or the 400 answer it earned); the document is dropped."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        DONE = "done"
        FAILED = "failed"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="import_jobs")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    document = models.JSONField(null=True, blank=True)
    title = models.CharField(max_length=TITLE_MAX, blank=True, default="")  # the document's, to list the job by
    rows = models.PositiveIntegerField(default=0)  # branches, actions, cards and memories the document holds
    adventure = models.ForeignKey(Adventure, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    error = models.JSONField(null=True, blank=True)  # the answer a synchronous import would have given
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)  # last handed to the workers
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["owner", "-created_at"]), models.Index(fields=["status", "sent_at"])]

    def __str__(self) -> str:
        return f"import {self.pk} ({self.status})"


SCENARIO_DESCRIPTION_MAX = 2000  # characters
SCENARIO_TAGS_MAX = 10  # tags per scenario
SCENARIO_TAG_MAX = 30  # characters per tag
CARDS_PER_SCENARIO_MAX = 100
SCENARIO_VERSIONS_KEPT = 50  # the newest versions a scenario keeps; older ones go (adventures keep their copy)


class Scenario(models.Model):
    """What starts a story, shared or not. Its content lives in versions (``current`` is the newest);
    the title, description, tags, rating and cover of the current one are kept here too, for the
    library (stories.library.scenarios writes them with the version, in one place)."""

    class Visibility(models.TextChoices):
        PRIVATE = "private"
        UNLISTED = "unlisted"  # anyone with the link (its key) reads and plays it
        PUBLISHED = "published"  # in the library

    # null: written by the project (the starter library, loaded by a migration); nobody edits those
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True, related_name="scenarios"
    )
    key = models.CharField(max_length=24, unique=True)  # the public id and the share link: unguessable
    slug = models.CharField(max_length=80, blank=True, default="")  # a starter's stable name
    visibility = models.CharField(max_length=10, choices=Visibility.choices, default=Visibility.PRIVATE)
    hidden = models.BooleanField(default=False)  # by a moderator: seen by its author only, never shared
    moderator_notice = models.CharField(max_length=500, blank=True, default="")  # what the author is told
    current = models.ForeignKey("ScenarioVersion", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    title = models.CharField(max_length=TITLE_MAX)
    description = models.TextField(blank=True, default="")
    tags = ArrayField(models.CharField(max_length=SCENARIO_TAG_MAX), default=list, blank=True)
    rating = models.CharField(max_length=10, choices=Rating.choices, default=Rating.EVERYONE)
    cover_emoji = models.CharField(max_length=16, blank=True, default="")
    cover_color = models.CharField(max_length=7, default="#4f5d95")
    search = SearchVectorField(null=True, editable=False)
    play_count = models.PositiveIntegerField(default=0)  # adventures started from it by others than its author
    published_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            GinIndex(fields=["search"], name="scenario_search"),
            GinIndex(fields=["tags"], name="scenario_tags"),
            models.Index(fields=["visibility", "hidden", "-published_at"], name="scenario_library_new"),
            models.Index(fields=["visibility", "hidden", "-play_count"], name="scenario_library_played"),
            models.Index(fields=["author", "-updated_at"]),
        ]
        constraints = [models.UniqueConstraint(fields=["slug"], condition=~Q(slug=""), name="one_starter_per_slug")]

    def __str__(self) -> str:
        return self.title


class ScenarioVersion(models.Model):
    """One saved state of a scenario: never changed once written (an adventure started from it
    copied it; a new save is a new version)."""

    scenario = models.ForeignKey(Scenario, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    title = models.CharField(max_length=TITLE_MAX)
    description = models.TextField(blank=True, default="")
    opening = models.TextField(blank=True, default="")
    plot_essentials = models.TextField(blank=True, default="")
    ai_instructions = models.TextField(blank=True, default="")
    authors_note = models.TextField(blank=True, default="")
    tags = ArrayField(models.CharField(max_length=SCENARIO_TAG_MAX), default=list, blank=True)
    rating = models.CharField(max_length=10, choices=Rating.choices, default=Rating.EVERYONE)
    cover_emoji = models.CharField(max_length=16, blank=True, default="")
    cover_color = models.CharField(max_length=7, default="#4f5d95")
    cards = models.JSONField(default=list, blank=True)  # story cards as the card API takes them
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["scenario", "number"], name="one_number_per_version")]

    def __str__(self) -> str:
        return f"{self.title} v{self.number}"


class ScenarioReport(models.Model):
    """A player's report of a scenario, for the moderators' queue."""

    class Reason(models.TextChoices):
        SPAM = "spam", "spam or advertising"
        HARASSMENT = "harassment", "harassment or hate"
        SEXUAL_MINORS = "minors", "sexual content involving minors"
        WRONG_RATING = "rating", "content above its rating"
        ILLEGAL = "illegal", "illegal content"
        COPYRIGHT = "copyright", "someone else's work"
        OTHER = "other", "something else"

    Status = ReportStatus  # actioned: the scenario was unpublished or hidden

    scenario = models.ForeignKey(Scenario, on_delete=models.CASCADE, related_name="reports")
    reporter = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    reason = models.CharField(max_length=12, choices=Reason.choices)
    text = models.TextField(blank=True, default="")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.OPEN)
    created_at = models.DateTimeField(auto_now_add=True)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["status", "created_at"])]
        constraints = [
            models.UniqueConstraint(
                fields=["scenario", "reporter"], condition=Q(status="open"), name="one_open_report_per_reporter"
            )
        ]

    def __str__(self) -> str:
        return f"report of {self.scenario} ({self.get_reason_display()})"


from stories.party.models import Invite, Membership, Party, StoryReport  # noqa: E402,F401  (the stories app's too)
