"""Playing: place the player's action, build the context, generate with the
user's own model, place the reply.

A turn is three steps. ``begin_play`` / ``begin_retry`` (a database step)
claim the adventure, store the player's action and build the context. The
model call (``Reply.deltas``) is awaited on the event loop with no thread and
no database connection held, the text arriving as the model writes it.
``Reply.finish`` (a database step) records the call and places the reply, or
what was written before the player stopped it, and frees the adventure.
"""

from __future__ import annotations

import asyncio
from contextlib import contextmanager
from dataclasses import dataclass

from django.db import DatabaseError

from config import jobs
from config.async_db import db_step, release_request_thread
from config.errors import Conflict, DomainError, InvalidRequest, as_domain_error
from memory.story import retrieval, summaries
from stories import accounts, context, limits, lineage, prompt_prefix, tree
from stories.adventures import access_adventure
from stories.context import Context, MemoryItem
from stories.generation import generation_claim, generation_release, held, keep_claimed
from stories.models import ACTION_TEXT_MAX, Action, Adventure, AISettings, Branch, ProviderCall
from stories.providers import Completion, Connection, ProviderError
from stories.providers.awaited import ModelCall

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


@dataclass
class Prepared:
    """A turn ready for its model call: the adventure claimed (``token``), the
    player's action stored (``placed``), the context built."""

    user_id: int
    adventure: Adventure
    branch: Branch
    token: str
    placed: list[Action]
    ctx: Context
    memories: list[MemoryItem]
    conn: Connection
    ai: AISettings
    reply_kind: str
    retake_of: Action | None = None  # a retry adds a take to this reply

    @property
    def sent(self) -> bytes:
        """The prompt's fingerprint, for the model call's log row (stories.prompt_prefix)."""
        return prompt_prefix.fingerprint(self.ctx.messages)


def _story_window(context_tokens: int) -> int:
    """How many recent actions to hand the builder (it drops what does not fit)."""
    return min(500, max(50, context_tokens // 40))


def _prepare(
    *,
    user_id: int,
    adventure: Adventure,
    branch: Branch,
    below_depth: int | None,
    token: str,
    placed: list[Action],
    reply_kind: str,
    retake_of: Action | None = None,
) -> Prepared:
    ai = accounts.ai_settings_loaded(adventure=adventure, user_id=user_id)
    conn = accounts.connection_for_turn(user_id=user_id, ai=ai)
    limits.model_call(user_id=user_id)
    story = lineage.recent(branch, count=_story_window(ai.context_tokens), below_depth=below_depth)
    cards = list(adventure.cards.all())
    recalled = retrieval.recall_for_turn(
        adventure=adventure,
        branch=branch,
        user_id=user_id,
        top_k=ai.memory_top_k,
        story=story,
        record_use=True,
        ai=ai,
        cards=cards,
    )
    ctx = context.build(
        adventure=adventure,
        story=story,
        cards=cards,
        memories=recalled.items,
        context_tokens=ai.context_tokens,
        model=conn.model,
        recall_note=recalled.fallback,
        knowledge=recalled.knowledge,
        summary_before=lambda depth: summaries.summary_before(branch, depth, current=adventure.story_summary),
    )
    # what of the last turn's prompt this one repeats (a prefix cache serves it): the access query
    # brought the last one's fingerprint, this one's goes into the model call's log row
    ctx.prefix_reused = prompt_prefix.reused(bytes(getattr(adventure, "last_prompt", None) or b""), ctx.messages)
    return Prepared(
        user_id=user_id,
        adventure=adventure,
        branch=branch,
        token=token,
        placed=placed,
        ctx=ctx,
        memories=recalled.items,
        conn=conn,
        ai=ai,
        reply_kind=reply_kind,
        retake_of=retake_of,
    )


@contextmanager
def _claimed(adventure_id: int):
    """Claim the adventure; free it again if the block fails (a later step frees it otherwise)."""
    token = generation_claim(adventure_id=adventure_id)  # one reply at a time: a 409 that stores nothing
    try:
        with held(token):
            yield token
    except BaseException:
        generation_release(adventure_id=adventure_id, token=token)
        raise


def begin_play(*, user_id: int, adventure: Adventure, mode: str, text: str) -> Prepared:
    """A turn's first step: the player's action (unless ``mode`` is continue)
    and the context. ``adventure`` comes from access_adventure for ``user_id``.
    Raises TurnFailed when the key or the database fails after the action was
    stored; the action stays, and retry gets the reply."""
    if mode not in PLAYER_MODES and mode != "continue":
        raise InvalidRequest(f"unknown mode {mode!r}")
    kind = Action.Kind.CONTINUE if mode == "continue" else Action.Kind.AI
    with _claimed(adventure.pk) as token:
        placed = []
        if mode in PLAYER_MODES:  # on the head as it stands once the claim holds the tree still
            placed.append(tree.place(adventure_id=adventure.pk, branch_id=None, kind=mode, text=text, ask_pass=False))
        with _failing_as_turn(placed):
            branch = placed[0].branch if placed else lineage.head(adventure)
            return _prepare(
                user_id=user_id,
                adventure=adventure,
                branch=branch,
                below_depth=None,
                token=token,
                placed=placed,
                reply_kind=kind,
            )


def begin_retry(*, user_id: int, adventure: Adventure) -> Prepared:
    """A new take of the last reply (earlier takes kept), or, when the last
    node is the player's (its reply failed), the missing reply."""
    with _claimed(adventure.pk) as token:
        branch = lineage.head(adventure)
        tip = lineage.node_at(branch, branch.tip_depth)
        if tip is None or tip.kind == Action.Kind.START:
            raise Conflict("there is no reply to retry yet; play a turn or continue")
        retake = tip if tip.is_model_output else None
        with _failing_as_turn([]):
            return _prepare(
                user_id=user_id,
                adventure=adventure,
                branch=branch,
                below_depth=tip.depth if retake else None,
                token=token,
                placed=[],
                reply_kind=tip.kind if retake else Action.Kind.AI,
                retake_of=retake,
            )


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


class Reply:
    """The model's reply to a prepared turn, awaited on the event loop."""

    def __init__(self, prepared: Prepared, *, stream: bool):
        p = prepared
        self.prepared = p
        self.call = ModelCall(
            conn=p.conn,
            messages=p.ctx.messages,
            max_tokens=p.ai.max_output_tokens,
            temperature=p.ai.temperature,
            reasoning_max_tokens=p.ai.reasoning_max_tokens,
            stream=stream,
        )

    async def deltas(self):
        """The text as the model writes it. A model failure ends the pieces
        early; ``finish`` answers it."""
        release_request_thread()  # nothing of this request waits on a thread while the model writes
        keeper = asyncio.create_task(keep_claimed(adventure_id=self.prepared.adventure.pk, token=self.prepared.token))
        try:
            async for piece in self.call.deltas():
                yield piece
        except ProviderError:
            return
        finally:
            keeper.cancel()

    async def finish(self, *, stopped: bool = False) -> TurnResult | None:
        """Record the call and place the reply (when ``stopped``, the text written
        so far; nothing when that is empty, which answers None). Raises
        TurnFailed when the model failed."""
        return await db_step(_finish, self.prepared, self.call, stopped)

    async def stop(self) -> None:
        """The player stopped the reply (or left): keep what was written, whatever else is cancelled."""
        await asyncio.shield(self.finish(stopped=True))


def _finish(p: Prepared, call: ModelCall, stopped: bool) -> TurnResult | None:
    released = False
    try:
        with held(p.token), _failing_as_turn(p.placed):
            call.record(
                user_id=p.user_id,
                purpose=ProviderCall.Purpose.TURN,
                adventure_id=p.adventure.pk,
                stopped=stopped,
                sent=p.sent,
            )
            if call.error is not None:
                if p.conn.demo:
                    accounts.demo_refund(user_id=p.user_id)
                raise call.error
            completion = (
                call.completion
                if call.completion is not None and not stopped
                else Completion(
                    text=call.text.strip(),
                    model=p.conn.model,
                    prompt_tokens=0,
                    completion_tokens=0,
                    latency_ms=0,
                    finish_reason="stopped",
                )
            )
            text = completion.text[:ACTION_TEXT_MAX]
            if not text:  # stopped before a word was written: the player's action stays alone
                if p.placed:
                    jobs.memory_pass_after_commit(adventure_id=p.adventure.pk)
                return None
            if p.retake_of is not None:
                reply = tree.take_add(
                    adventure_id=p.adventure.pk,
                    branch_id=p.branch.pk,
                    expected_tip_id=p.retake_of.pk,
                    kind=p.retake_of.kind,
                    text=text,
                )
            else:
                reply = tree.place(
                    adventure_id=p.adventure.pk, branch_id=p.branch.pk, kind=p.reply_kind, text=text, release=p.token
                )
                released = True  # the reply's write freed the claim
            return TurnResult(p.placed + [reply], p.ctx, completion, p.memories, p.conn.demo)
    finally:
        if not released:
            generation_release(adventure_id=p.adventure.pk, token=p.token)


def insights(*, user_id: int, adventure_id: int) -> Context:
    """A dry run of the next turn's context. Changes nothing, spends nothing."""
    adventure = access_adventure(user_id=user_id, adventure_id=adventure_id)
    branch = lineage.head(adventure)
    ai = accounts.ai_settings_get(user_id=user_id)
    model = accounts.model_for_display(user_id=user_id)
    story = lineage.recent(branch, count=_story_window(ai.context_tokens))
    cards = list(adventure.cards.all())
    recalled = retrieval.recall_for_turn(
        adventure=adventure,
        branch=branch,
        user_id=user_id,
        top_k=ai.memory_top_k,
        story=story,
        record_use=False,
        ai=ai,
        cards=cards,
    )
    ctx = context.build(
        adventure=adventure,
        story=story,
        cards=cards,
        memories=recalled.items,
        context_tokens=ai.context_tokens,
        model=model,
        recall_note=recalled.fallback,
        knowledge=recalled.knowledge,
        summary_before=lambda depth: summaries.summary_before(branch, depth, current=adventure.story_summary),
    )
    last = (
        ProviderCall.objects.filter(adventure_id=adventure.pk, purpose=ProviderCall.Purpose.TURN)
        .order_by("-created_at", "-id")
        .values_list("prompt_fingerprint", "cached_tokens", "outcome")
        .first()
    )
    if last is not None:
        ctx.prefix_reused = prompt_prefix.reused(bytes(last[0]), ctx.messages)
        ctx.last_cached_tokens = last[1] if last[2] == "ok" else None
    return ctx
