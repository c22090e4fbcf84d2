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
import logging
from contextlib import contextmanager
from dataclasses import dataclass

from django.db import DatabaseError

from config import jobs
from config.async_db import db_step, release_request_thread
from config.errors import Conflict, DomainError, InvalidRequest, as_domain_error
from memory.story import claims, retrieval, summaries
from play import last_context, live, turn_keys
from stories import limits
from stories.accounts import ai_settings
from stories.models import ACTION_TEXT_MAX, Action, Adventure, AISettings, Branch, ProviderCall
from stories.party import order
from stories.party.models import TurnMode
from stories.prompt import builder, prefix, sampling
from stories.prompt.context import Context, MemoryItem, SummaryFrame
from stories.providers import Completion, Connection, ProviderError
from stories.providers.awaited import ModelCall
from stories.tree import history, lineage, writes
from stories.tree.generation import generation_claim, generation_release, held, keep_claimed

log = logging.getLogger(__name__)

PLAYER_MODES = ("do", "say", "story")


@dataclass
class TurnResult:
    actions: list[Action]
    context: Context
    completion: Completion
    memories: list[MemoryItem]
    demo: bool
    notices: tuple[str, ...] = ()


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
    sent: bytes = b""  # the prompt's fingerprint, for the model call's log row (stories.prompt.prefix)
    story_ids: tuple[int, ...] = ()  # the story's nodes the prompt tells
    notices: tuple[str, ...] = ()  # what the player should know of how the turn was played


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
    notices: tuple[str, ...] = (),
) -> Prepared:
    ai = ai_settings.for_adventure(ai_settings.ai_settings_loaded(adventure=adventure, user_id=user_id), adventure)
    conn = ai_settings.connection_for_turn(user_id=user_id, ai=ai)
    limits.model_call(user_id=user_id)
    story = lineage.recent(branch, count=_story_window(ai.context_tokens), below_depth=below_depth)
    ctx, recalled = _told(adventure, branch, user_id=user_id, ai=ai, story=story, model=conn.model, record_use=True)
    # what of the last turn's prompt this one repeats (a prefix cache serves it): the access query
    # brought the last one's fingerprint, this one's goes into the model call's log row
    sent = prefix.fingerprint(ctx.messages)
    ctx.prefix_reused = prefix.reused(bytes(getattr(adventure, "last_prompt", None) or b""), sent)
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
        sent=sent,
        story_ids=tuple(a.pk for a in story),
        notices=notices,
    )


def _told(
    adventure: Adventure,
    branch: Branch,
    *,
    user_id: int,
    ai: AISettings,
    story: list[Action],
    model: str,
    record_use: bool,
) -> tuple[Context, retrieval.Recall]:
    """What the model is told after ``story``, and what recall brought: a turn's and Insights' alike.
    ``record_use``: the memories told count as used (a turn; Insights is a dry run)."""
    cards, _ = claims.cards_told(branch, list(adventure.cards.all()))  # with what the story changed on them
    recalled = retrieval.recall_for_turn(
        adventure=adventure,
        branch=branch,
        user_id=user_id,
        top_k=ai.memory_top_k,
        story=story,
        record_use=record_use,
        ai=ai,
        cards=cards,
    )
    ctx = builder.build(
        adventure=adventure,
        story=story,
        cards=cards,
        memories=recalled.items,
        context_tokens=ai.context_tokens,
        model=model,
        recall_note=recalled.fallback,
        knowledge=recalled.knowledge,
        summaries=_summaries(adventure, branch, story),
    )
    return ctx, recalled


def _summaries(adventure: Adventure, branch: Branch, story: list[Action]) -> SummaryFrame | None:
    """What memory holds of the path's summaries around ``story``, for the prefix-cache layout (the
    older order tells the current summary)."""
    if adventure.memories_before_story or not story:
        return None
    return summaries.summary_frame(branch, story[0].depth, current=adventure.story_summary)


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


def _member(adventure: Adventure, user_id: int) -> tuple[int | None, str]:
    """The author and the character of a member's turn; none for the owner's."""
    if user_id == adventure.owner_id:
        return None, ""
    if not getattr(adventure, "actor", ""):
        raise Conflict("your character is no longer in this story; ask the owner to give you one")
    return user_id, adventure.actor


def begin_play(*, user_id: int, adventure: Adventure, mode: str, text: str, key: str = "") -> Prepared:
    """A turn's first step: the player's action (unless ``mode`` is continue)
    and the context. ``adventure`` comes from access_adventure for ``user_id``.
    Raises TurnFailed when the key or the database fails after the action was
    stored; the action stays, and retry gets the reply.

    ``key``: the client's idempotency key for this action. Sent again (the page resends the same
    text after a failed reply), the action it stored is used again while it still waits for its
    reply at the story's end: never the same action twice; once answered, a 409.

    A member's turn (stories.party) is written as their character; the owner's model and key pay."""
    if mode not in PLAYER_MODES and mode != "continue":
        raise InvalidRequest(f"unknown mode {mode!r}")
    author, actor = _member(adventure, user_id)
    kind = Action.Kind.CONTINUE if mode == "continue" else Action.Kind.AI
    with _claimed(adventure.pk) as token:
        if getattr(adventure, "turn_mode", None) == TurnMode.ROUND_ROBIN:  # a story played together, in turns
            order.turn_check(adventure, lineage.head(adventure), user_id=user_id)
        placed, notices, again = [], [], None
        if key and mode in PLAYER_MODES:
            try:
                again = turn_keys.sent_before(user_id=user_id, adventure=adventure, key=key)
            except turn_keys.KeyUnavailable:
                key, notices = "", [turn_keys.UNAVAILABLE]
        if again is not None:
            placed.append(again)
        elif mode in PLAYER_MODES:  # on the head as it stands once the claim holds the tree still
            placed.append(
                writes.place(
                    adventure_id=adventure.pk,
                    branch_id=None,
                    kind=mode,
                    text=text,
                    ask_pass=False,
                    author_id=author,
                    actor=actor,
                )
            )
            if key and not turn_keys.remember(
                user_id=user_id, adventure_id=adventure.pk, key=key, action_id=placed[0].pk
            ):
                notices = [turn_keys.UNAVAILABLE]
        with _failing_as_turn(placed):
            branch = placed[0].branch if placed else lineage.head(adventure)
            return _prepare(
                user_id=adventure.owner_id,
                adventure=adventure,
                branch=branch,
                below_depth=None,
                token=token,
                placed=placed,
                reply_kind=kind,
                notices=tuple(notices),
            )


def begin_retry(*, user_id: int, adventure: Adventure) -> Prepared:
    """A new take of the last reply (earlier takes kept), or, when the last
    node is the player's (its reply failed), the missing reply."""
    with _claimed(adventure.pk) as token:
        branch = lineage.head(adventure)
        tip = lineage.node_at_even_hidden(branch, branch.tip_depth)
        if tip is None or tip.kind == Action.Kind.START:
            raise Conflict("there is no reply to retry yet; play a turn or continue")
        retake = tip if tip.is_model_output else None
        if user_id != adventure.owner_id:  # a member retries only a turn they wrote
            before = lineage.node_at_even_hidden(branch, tip.depth - 1) if retake else None
            history.turn_authors_only([n for n in (before, tip) if n is not None], member_id=user_id, doing="retry")
        with _failing_as_turn([]):
            return _prepare(
                user_id=adventure.owner_id,
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
            sampling=sampling.request_fields(p.ai, p.conn.endpoint_url),
        )

    async def deltas(self):
        """The text as the model writes it. A model failure ends the pieces
        early; ``finish`` answers it."""
        release_request_thread()  # nothing of this request waits on a thread while the model writes
        p = self.prepared
        keeper = asyncio.create_task(keep_claimed(adventure_id=p.adventure.pk, token=p.token))
        together = bool(getattr(p.adventure, "together", False))  # the members' pages follow it live
        if together:
            began = {"actions": [live.action_data(a) for a in p.placed], "retake": p.retake_of is not None}
            await live.publish_soon(p.adventure.pk, "turn", began)
        relay = live.Relay(p.adventure.pk) if together else None
        try:
            async for piece in self.call.deltas():
                if relay is not None:
                    await relay.add(piece)
                yield piece
        except ProviderError:
            return
        finally:
            keeper.cancel()
            if relay is not None:
                await asyncio.shield(relay.flush())

    async def finish(self, *, stopped: bool = False) -> TurnResult | None:
        """Record the call and place the reply (when ``stopped``, the text written
        so far; nothing when that is empty, which answers None). Raises
        TurnFailed when the model failed."""
        p = self.prepared
        if not getattr(p.adventure, "together", False):
            return await db_step(_finish, p, self.call, stopped)
        try:
            result = await db_step(_finish, p, self.call, stopped)
        except TurnFailed as exc:
            await live.publish_soon(p.adventure.pk, "failed", {"error": exc.error.code})
            raise
        done = [live.action_data(a) for a in result.actions] if result else []
        await live.publish_soon(p.adventure.pk, "done", {"actions": done, "stopped": stopped})
        return result

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
                    ai_settings.demo_refund(user_id=p.user_id)
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
                reply = writes.take_add(
                    adventure_id=p.adventure.pk,
                    branch_id=p.branch.pk,
                    expected_tip_id=p.retake_of.pk,
                    kind=p.retake_of.kind,
                    text=text,
                )
            else:
                reply = writes.place(
                    adventure_id=p.adventure.pk, branch_id=p.branch.pk, kind=p.reply_kind, text=text, release=p.token
                )
                released = True  # the reply's write freed the claim
            last_context.keep(p.adventure, p.ctx, story_ids=p.story_ids, cached_tokens=completion.cached_tokens)
            return TurnResult(p.placed + [reply], p.ctx, completion, p.memories, p.conn.demo, p.notices)
    finally:
        if not released:
            generation_release(adventure_id=p.adventure.pk, token=p.token)
