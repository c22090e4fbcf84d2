"""Playing: place the player's action, build the context, generate with the
user's own model, place the reply. Each write is its own short transaction;
the model call runs outside any transaction."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

from django.db import DatabaseError

from config import jobs
from memory import retrieval
from stories import accounts, context, lineage, providers, tree
from stories.adventures import access_adventure
from stories.context import Context, MemoryItem
from stories.errors import Conflict, DomainError, InvalidRequest, as_domain_error
from stories.generation import generating
from stories.models import ACTION_TEXT_MAX, Action, Adventure, Branch, ProviderCall
from stories.providers import Completion, ProviderError

PLAYER_MODES = ("do", "say", "story")


@dataclass
class TurnResult:
    actions: list[Action]
    context: Context
    completion: Completion
    memories: list[MemoryItem]
    demo: bool


class TurnFailed(Exception):
    """The model (or the key, or the database) failed the turn; ``error`` says
    why, ``stored`` are the player's actions that were kept."""

    def __init__(self, error: DomainError, stored: list[Action]):
        super().__init__(str(error))
        self.error = error
        self.stored = stored


def _story_window(context_tokens: int) -> int:
    """How many recent actions to hand the builder (it drops what does not fit)."""
    return min(500, max(50, context_tokens // 40))


def _generate(*, user_id: int, adventure: Adventure, branch: Branch, below_depth: int | None):
    ai = accounts.ai_settings_get(user_id=user_id)
    conn = accounts.connection_for_turn(user_id=user_id, ai=ai)
    story = lineage.recent(branch, count=_story_window(ai.context_tokens), below_depth=below_depth)
    recalled = retrieval.recall_for_turn(adventure=adventure, branch=branch, user_id=user_id, top_k=ai.memory_top_k,
                                story=story, record_use=True, ai=ai)
    memories = recalled.items
    ctx = context.build(adventure=adventure, story=story, cards=list(adventure.cards.all()), memories=memories,
                        context_tokens=ai.context_tokens, model=conn.model, recall_note=recalled.fallback)
    try:
        completion = providers.complete(
            conn=conn, messages=ctx.messages, max_tokens=ai.max_output_tokens, temperature=ai.temperature,
            user_id=user_id, purpose=ProviderCall.Purpose.TURN, adventure_id=adventure.pk,
            reasoning_max_tokens=ai.reasoning_max_tokens,
        )
    except ProviderError:
        if conn.demo:
            accounts.demo_refund(user_id=user_id)
        raise
    return completion, ctx, memories, conn


def play(*, user_id: int, adventure: Adventure, mode: str, text: str) -> TurnResult:
    """One turn: the player's action (unless ``mode`` is continue), then the reply.
    ``adventure`` comes from access_adventure for ``user_id``.

    Raises TurnFailed when the model, the key or the database fails after the
    player's action was stored; the action stays, and retry gets the reply."""
    if mode not in PLAYER_MODES and mode != "continue":
        raise InvalidRequest(f"unknown mode {mode!r}")
    placed: list[Action] = []
    kind = Action.Kind.CONTINUE if mode == "continue" else Action.Kind.AI
    with generating(adventure_id=adventure.pk):  # one reply at a time: a second turn is a 409 and stores nothing
        if mode in PLAYER_MODES:
            placed.append(tree.place(adventure_id=adventure.pk, branch_id=adventure.head_branch_id, kind=mode,
                                     text=text, ask_pass=False))
        with _failing_as_turn(placed):
            branch = Branch.objects.get(pk=adventure.head_branch_id)
            completion, ctx, memories, conn = _generate(user_id=user_id, adventure=adventure, branch=branch,
                                                        below_depth=None)
            reply = tree.place(adventure_id=adventure.pk, branch_id=branch.pk, kind=kind,
                               text=completion.text[:ACTION_TEXT_MAX])
    return TurnResult(placed + [reply], ctx, completion, memories, conn.demo)


@contextmanager
def _failing_as_turn(stored: list[Action]):
    """A domain error (the model, the key, a conflict) or a database outage
    after the player's action was stored fails the turn as TurnFailed."""
    try:
        yield
    except DomainError as exc:
        if stored:  # the reply's place() did not run: the stored action still wants remembering
            jobs.memory_pass_after_commit(adventure_id=stored[0].adventure_id)
        raise TurnFailed(exc, stored) from None
    except DatabaseError as exc:
        outage = as_domain_error(exc)
        if outage is None or not stored:
            raise  # a bug (500), or nothing of the player's at stake: an outage answers 503 as any request
        jobs.memory_pass_after_commit(adventure_id=stored[0].adventure_id)  # sent when the broker answers
        raise TurnFailed(outage, stored) from None


def retry(*, user_id: int, adventure: Adventure) -> TurnResult:
    """A new take of the last reply (earlier takes kept), or, when the last
    node is the player's (its reply failed), the missing reply. ``adventure``
    comes from access_adventure for ``user_id``."""
    with generating(adventure_id=adventure.pk):
        branch = Branch.objects.get(pk=adventure.head_branch_id)
        tip = lineage.node_at(branch, branch.tip_depth)
        if tip is None or tip.kind == Action.Kind.START:
            raise Conflict("there is no reply to retry yet; play a turn or continue")
        below = tip.depth if tip.is_model_output else None
        with _failing_as_turn([]):
            completion, ctx, memories, conn = _generate(user_id=user_id, adventure=adventure, branch=branch,
                                                        below_depth=below)
        text = completion.text[:ACTION_TEXT_MAX]
        if tip.is_model_output:
            reply = tree.take_add(adventure_id=adventure.pk, branch_id=branch.pk, expected_tip_id=tip.pk,
                                  kind=tip.kind, text=text)
        else:
            reply = tree.place(adventure_id=adventure.pk, branch_id=branch.pk, kind=Action.Kind.AI, text=text)
    return TurnResult([reply], ctx, completion, memories, conn.demo)


def insights(*, user_id: int, adventure_id: int) -> Context:
    """A dry run of the next turn's context. Changes nothing, spends nothing."""
    adventure = access_adventure(user_id=user_id, adventure_id=adventure_id)
    branch = Branch.objects.get(pk=adventure.head_branch_id)
    ai = accounts.ai_settings_get(user_id=user_id)
    model = accounts.model_for_display(user_id=user_id)
    story = lineage.recent(branch, count=_story_window(ai.context_tokens))
    recalled = retrieval.recall_for_turn(adventure=adventure, branch=branch, user_id=user_id, top_k=ai.memory_top_k,
                                story=story, record_use=False, ai=ai)
    return context.build(adventure=adventure, story=story, cards=list(adventure.cards.all()), memories=recalled.items,
                         context_tokens=ai.context_tokens, model=model, recall_note=recalled.fallback)
