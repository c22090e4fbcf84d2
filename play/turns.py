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

from config import jobs, server_timing
from config.async_db import db_step, release_request_thread
from config.errors import Conflict, DomainError, Forbidden, InvalidRequest, as_domain_error
from play import last_context, live, told, turn_keys
from stories import limits
from stories.accounts import ai_settings
from stories.models import ACTION_TEXT_MAX, Action, Adventure, AISettings, Branch, ProviderCall
from stories.party import order, secrets
from stories.party.models import Party, TurnMode
from stories.prompt import prefix, sampling
from stories.prompt.context import Context, MemoryItem
from stories.providers import Completion, Connection, ProviderError
from stories.providers.awaited import ModelCall
from stories.tree import history, lineage, writes
from stories.tree.generation import generation_claim, generation_release, held, keep_claimed
from stories.tree.sql import OWNER, Teller

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
    viewer: int | None = None  # whose turn: the story as they may read it (stories.party.secrets); None: shared
    secret: Teller = OWNER  # the reply's readers: a secret's answer is told to the same few


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
    viewer: int | None,
    secret: Teller = OWNER,
) -> Prepared:
    with server_timing.phase("settings"):
        ai = ai_settings.for_adventure(ai_settings.ai_settings_loaded(adventure=adventure, user_id=user_id), adventure)
        conn = ai_settings.connection_for_turn(user_id=user_id, ai=ai)
        limits.model_call(user_id=user_id)
    window = told.story_window(ai.context_tokens)
    with server_timing.phase("story"):
        story = lineage.recent(branch, count=window, below_depth=below_depth, viewer=viewer)
    with server_timing.phase("context"):
        ctx, recalled = told.context_told(
            adventure, branch, user_id=user_id, viewer=viewer, ai=ai, story=story, model=conn.model, record_use=True
        )
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
        viewer=viewer,
        secret=secret,
    )


@contextmanager
def _claimed(adventure_id: int):
    """Claim the adventure; free it again if the block fails (a later step frees it otherwise)."""
    with server_timing.phase("claim"):
        token = generation_claim(adventure_id=adventure_id)  # one reply at a time: a 409 that stores nothing
    try:
        with held(token):
            yield token
    except BaseException:
        generation_release(adventure_id=adventure_id, token=token)
        raise


def _teller(adventure: Adventure, user_id: int, *, private: bool, to: list[str]) -> Teller:
    """Who tells ``user_id``'s turn: a member as their character, the owner as "you"; a secret
    (``private``, or whispered ``to`` characters) to those it is told to (stories.party.secrets)."""
    if user_id != adventure.owner_id and not getattr(adventure, "actor", ""):
        raise Conflict("your character is no longer in this story; ask the owner to give you one")
    actor = "" if user_id == adventure.owner_id else adventure.actor
    return secrets.teller_for(adventure=adventure, user_id=user_id, actor=actor, private=private, to=to)


def begin_play(
    *,
    user_id: int,
    adventure: Adventure,
    mode: str,
    text: str,
    key: str = "",
    private: bool = False,
    to: list[str] | tuple = (),
) -> Prepared:
    """A turn's first step: the player's action (unless ``mode`` is continue)
    and the context. ``adventure`` comes from access_adventure for ``user_id``.
    Raises TurnFailed when the key or the database fails after the action was
    stored; the action stays, and retry gets the reply.

    ``key``: the client's idempotency key for this action. Sent again (the page resends the same
    text after a failed reply), the action it stored is used again while it still waits for its
    reply at the story's end: never the same action twice; once answered, a 409.

    A member's turn (stories.party) is written as their character; the owner's model and key pay.
    ``private`` / ``to``: the turn is a secret, told to the narrator alone or whispered to characters,
    and so is its reply."""
    if mode not in PLAYER_MODES and mode != "continue":
        raise InvalidRequest(f"unknown mode {mode!r}")
    with server_timing.phase("teller"):
        teller = _teller(adventure, user_id, private=private, to=list(to))
    kind = Action.Kind.CONTINUE if mode == "continue" else Action.Kind.AI
    gather = getattr(adventure, "turn_mode", None) == TurnMode.GATHER
    if gather and teller.seen_by is not None:
        raise InvalidRequest("a round of gathered turns is narrated to everyone: whisper in free or round-robin turns")
    with _claimed(adventure.pk) as token:
        if getattr(adventure, "turn_mode", None) == TurnMode.ROUND_ROBIN:  # a story played together, in turns
            order.turn_check(adventure, lineage.head(adventure), user_id=user_id)
        placed, notices, again = [], [], None
        if key and mode in PLAYER_MODES:
            try:
                again = turn_keys.sent_before(user_id=user_id, adventure=adventure, key=key)
            except turn_keys.KeyUnavailable:
                key, notices = "", [turn_keys.UNAVAILABLE]
        if gather and again is None:  # one action a player a round; its narration when the round is done
            order.gather_check(adventure, lineage.head(adventure), user_id=user_id, writing=mode in PLAYER_MODES)
        if again is not None:
            placed.append(again)
        elif mode in PLAYER_MODES:  # on the head as it stands once the claim holds the tree still
            placed_at = server_timing.now()
            placed.append(
                writes.place(
                    adventure_id=adventure.pk,
                    branch_id=None,
                    kind=mode,
                    text=text,
                    ask_pass=False,
                    teller=teller,
                )
            )
            if key and not turn_keys.remember(
                user_id=user_id, adventure_id=adventure.pk, key=key, action_id=placed[0].pk
            ):
                notices = [turn_keys.UNAVAILABLE]
            server_timing.since("place", placed_at)
        if gather and placed:
            _gathered(adventure, placed)
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
                viewer=None if gather else user_id,  # a round's narration is told the shared story
                secret=Teller.of(placed[0]).secret() if placed else teller.secret(),
            )


class Gathered(Exception):
    """A gather round's action stored while others are still to write: no reply yet (the claim is
    freed); the narration answers the round when it is complete or closed (stories.party.order)."""

    def __init__(self, action: Action, round_now: order.Round):
        super().__init__("gathered")
        self.action, self.round = action, round_now


def _gathered(adventure: Adventure, placed: list[Action]) -> None:
    """Raise Gathered unless ``placed`` completed its round (then the narration is written now)."""
    party = Party.objects.get(adventure=adventure)
    now = order.gathered(adventure, placed[0].branch, party=party)
    if not now.complete:
        jobs.memory_pass_after_commit(adventure_id=adventure.pk)
        raise Gathered(placed[0], now)


def begin_retry(*, user_id: int, adventure: Adventure) -> Prepared:
    """A new take of the last reply (earlier takes kept), or, when the last
    node is the player's (its reply failed), the missing reply."""
    with _claimed(adventure.pk) as token:
        branch = lineage.head(adventure)
        tip = lineage.node_at_even_hidden(branch, branch.tip_depth)
        if tip is None or tip.kind == Action.Kind.START:
            raise Conflict("there is no reply to retry yet; play a turn or continue")
        retake = tip if tip.is_model_output else None
        if not secrets.may_read(tip, user_id):
            raise Forbidden("the last turn is a secret you were not told; only those it was told to can retry it")
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
                viewer=user_id,
                secret=Teller.of(tip).secret(),
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
            text_max=ACTION_TEXT_MAX,  # what one action holds: the player reads what is kept
        )
        self.told: asyncio.Task | None = None  # a story played together: its turn event, on its way

    async def deltas(self):
        """The text as the model writes it. A model failure ends the pieces
        early; ``finish`` answers it."""
        release_request_thread()  # nothing of this request waits on a thread while the model writes
        p = self.prepared
        keeper = asyncio.create_task(keep_claimed(adventure_id=p.adventure.pk, token=p.token))
        together = bool(getattr(p.adventure, "together", False))  # the members' pages follow it live
        relay = None
        if together:  # the turn told to the members' pages beside the model call, not before it
            began = {"actions": [live.action_data(a) for a in p.placed], "retake": p.retake_of is not None}
            self.told = asyncio.create_task(live.publish_soon(p.adventure.pk, "turn", began, seen_by=p.secret.seen_by))
            relay = live.Relay(p.adventure.pk, seen_by=p.secret.seen_by, after=self.told)
        try:
            async for piece in self.call.deltas():
                if relay is not None:
                    relay.add(piece)
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
        if self.told is not None:
            await asyncio.shield(self.told)  # the pages hear of the turn before its end
        try:
            result = await db_step(_finish, p, self.call, stopped)
        except TurnFailed as exc:
            await live.publish_soon(p.adventure.pk, "failed", {"error": exc.error.code})
            raise
        done = [live.action_data(a) for a in result.actions] if result else []
        await live.publish_soon(p.adventure.pk, "done", {"actions": done, "stopped": stopped}, seen_by=p.secret.seen_by)
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
                    adventure_id=p.adventure.pk,
                    branch_id=p.branch.pk,
                    kind=p.reply_kind,
                    text=text,
                    release=p.token,
                    teller=p.secret,
                )
                released = True  # the reply's write freed the claim
            kept = {"viewer": p.viewer, "story_ids": p.story_ids, "cached_tokens": completion.cached_tokens}
            last_context.keep(p.adventure, p.ctx, **kept)
            return TurnResult(p.placed + [reply], p.ctx, completion, p.memories, p.conn.demo, p.notices)
    finally:
        if not released:
            generation_release(adventure_id=p.adventure.pk, token=p.token)
