"""What the story changed on the cards: claims, a layer under the player's text (memory.models.CardClaim).

The pass reads each block (the offline reader, memory.story.claims_reader; or the owner's model in
the cast's structured call) and stores what it read in the block's transaction. A claim hangs off
its evidence action, so it follows the branch as the memories do: an undo past it, a retry of its
take or a moderator's hide of it takes it off the path; a fork keeps those before its point; an
edit of it withdraws it and the pass reads the edited block again. On a path, the newest claim of a
card, slot and topic (by its evidence's depth) stands; a claim never changes the player's text: the
prompt tells the card as written and, under it, what stands ("since passage 214: dead").

The player reviews: accept (merged into the card's text, a card version), reject (never told, and
never proposed again from that evidence), edit (theirs: no reading replaces it). With the
adventure's ``claims_review`` on, claims wait as proposed until then.
"""

from __future__ import annotations

from django.db import connection, transaction

from config.errors import InvalidRequest, NotFound
from memory.models import CardClaim
from memory.story import canon, claims_reader, claims_words
from stories.cards import present_cards
from stories.models import CARD_ENTRY_MAX, Action, Adventure, Branch, StoryCard
from stories.tree import lineage

SLOTS = claims_words.SLOTS
STANDS = (CardClaim.State.APPLIED, CardClaim.State.ACCEPTED)  # what supersedes: told, or merged into the text
LINE_CLAIMS_MAX = 8  # claims told under one card, the newest first


def on_path(branch: Branch, *, before: int | None = None):
    """The claims whose evidence is on ``branch``'s path: a live take, not hidden, not past its tip
    (``before``: evidence older than that depth only)."""
    depth = branch.tip_depth if before is None else min(branch.tip_depth, before - 1)
    return CardClaim.objects.filter(
        lineage.path_q(branch, prefix="action__"),
        adventure_id=branch.adventure_id,
        action__live=True,
        action__hidden=False,
        action__depth__lte=depth,
    )


def _key(claim) -> tuple[int, str, str]:
    return (claim.card_id, claim.slot, claim.topic)


def _standing(claims) -> dict[tuple[int, str, str], CardClaim]:
    """The newest claim per card, slot and topic among ``claims`` (the deepest evidence, then the newest)."""
    found: dict = {}
    for claim in sorted(claims, key=lambda c: (c.action.depth, c.pk)):
        found[_key(claim)] = claim
    return found


def standing_values(branch: Branch, *, before: int) -> dict[tuple[int, str, str], str]:
    """What stands on the path before depth ``before`` (told, merged or waiting for review), as the
    reader compares: a claim equal to it is not read again."""
    # chosen in SQL as _standing chooses (the deepest evidence, then the newest): every block of the pass
    # asks, and the path's every claim with its action row was ~5% of a cast's pass
    rows = (
        on_path(branch, before=before)
        .exclude(state=CardClaim.State.REJECTED)
        .order_by("card_id", "slot", "topic", "-action__depth", "-pk")
        .distinct("card_id", "slot", "topic")
        .values_list("card_id", "slot", "topic", "value")
    )
    return {(card_id, slot, topic): value for card_id, slot, topic, value in rows}


def block_read(*, adventure: Adventure, head: Branch, actions: list[Action], cards: list[StoryCard], name: str):
    """The offline reading of a block (outside its transaction: it only reads)."""
    if not actions or not cards:
        return []
    return claims_reader.read_block(
        actions=actions, cards=cards, name=name, standing=standing_values(head, before=actions[0].depth)
    )


def model_read(*, head: Branch, actions: list[Action], reads: list) -> list:
    """The model's reading of a block, as the offline reader's is kept: a value equal to what stands
    before it (or to the one just read for the same card, slot and topic) is not read again."""
    state = standing_values(head, before=actions[0].depth) if actions else {}
    out = []
    for read in reads:
        key = (read.card_id, read.slot, read.topic)
        if state.get(key) != read.value:
            state[key] = read.value
            out.append(read)
    return out


def block_store(*, adventure: Adventure, reads: list, offline: bool = True) -> int:
    """Store a block's claims (in the block's transaction). A claim the player rejected, edited or
    accepted from the same evidence is not made again; nor is one already stored (a rerun)."""
    if not reads:
        return 0
    held = set(
        CardClaim.objects.filter(adventure=adventure, action_id__in={r.action_id for r in reads}).values_list(
            "card_id", "slot", "topic", "action_id"
        )
    )
    live_cards = set(StoryCard.every.filter(adventure=adventure).values_list("pk", flat=True))
    state = CardClaim.State.PROPOSED if adventure.claims_review else CardClaim.State.APPLIED
    rows = [
        CardClaim(
            adventure=adventure,
            card_id=r.card_id,
            action_id=r.action_id,
            slot=r.slot,
            topic=r.topic,
            value=r.value,
            text=r.text,
            state=state,
            offline=offline,
        )
        for r in reads
        if (r.card_id, r.slot, r.topic, r.action_id) not in held and r.card_id in live_cards
    ]
    CardClaim.objects.bulk_create(rows)
    return len(rows)


def withdraw_edited(*, branch_id: int, depth: int, block: int) -> None:
    """The evidence at (``branch_id``, ``depth``) was edited: the claims read from it leave (but those
    the player edited, rejected or accepted), and its block, if full, is read again at once, offline
    (in the edit's transaction: ~1 ms; the pass's rewrite adds what the owner's model reads)."""
    CardClaim.objects.filter(action__branch_id=branch_id, action__depth=depth, action__live=True, edited=False).filter(
        state__in=[CardClaim.State.APPLIED, CardClaim.State.PROPOSED]
    ).delete()
    from memory.story.summarize import protagonist

    branch = Branch.objects.select_related("adventure").get(pk=branch_id)
    start = (depth - 1) // block * block + 1
    actions = list(lineage.story(branch).filter(depth__gte=start, depth__lt=start + block))
    if len(actions) < block:
        return  # not full: the pass reads it when it is
    adventure = branch.adventure
    cards = present_cards(adventure)
    read = block_read(adventure=adventure, head=branch, actions=actions, cards=cards, name=protagonist(adventure))
    block_store(adventure=adventure, reads=read)


def on_copied(*, from_branch_id: int, to_branch_id: int, depths: list[int]) -> None:
    """Claims whose evidence is a copied node hang off the copy too."""
    copies = canon.node_copies(to_branch_id, depths)
    if not copies:
        return
    claims = CardClaim.objects.filter(action__branch_id=from_branch_id, action__depth__in=list(copies))
    CardClaim.objects.bulk_create(
        [
            CardClaim(
                adventure_id=c.adventure_id,
                card_id=c.card_id,
                action_id=copies[c.action.depth],
                slot=c.slot,
                topic=c.topic,
                value=c.value,
                text=c.text,
                state=c.state,
                offline=c.offline,
                edited=c.edited,
            )
            for c in claims.select_related("action")
        ]
    )


# ---------------------------------------------------------------------------- what is told


def told_lines(claims: list[CardClaim]) -> str:
    """The claims told under a card's text, in story order."""
    return "\n".join(f"Since passage {c.action.depth}: {c.value}. ({c.text})" for c in claims)


def told_on_path(branch: Branch, card_ids: list[int]) -> dict[int, list[CardClaim]]:
    """For each card, the claims that stand on the path and are told (applied, not merged): one query."""
    if not card_ids:
        return {}
    # Every turn asks it: the newest claim per card, slot and topic chosen in SQL (as _standing does:
    # the deepest evidence, then the newest), so only the claims that stand come back, not all of them.
    path, params = lineage.path_sql(branch, table="a")
    with connection.cursor() as db:
        db.execute(
            "SELECT id, card_id, slot, topic, value, text, action_id, depth FROM ("
            " SELECT DISTINCT ON (c.card_id, c.slot, c.topic) c.id, c.card_id, c.slot, c.topic, c.value, c.text,"
            " c.state, c.action_id, a.depth"
            f" FROM {CardClaim._meta.db_table} c JOIN {Action._meta.db_table} a ON a.id = c.action_id"
            f" WHERE {path} AND c.adventure_id = %s AND a.adventure_id = %s AND a.live AND NOT a.hidden"
            " AND a.depth <= %s AND c.card_id = ANY(%s) AND c.state = ANY(%s)"
            " ORDER BY c.card_id, c.slot, c.topic, a.depth DESC, c.id DESC"
            ") standing WHERE state = %s",
            [*params, branch.adventure_id, branch.adventure_id, branch.tip_depth, list(card_ids), list(STANDS)]
            + [CardClaim.State.APPLIED],
        )
        rows = db.fetchall()
    out: dict[int, list[CardClaim]] = {}
    for pk, card_id, slot, topic, value, text, action_id, depth in rows:
        claim = CardClaim(
            pk=pk, adventure_id=branch.adventure_id, card_id=card_id, slot=slot, topic=topic, value=value, text=text,
            state=CardClaim.State.APPLIED, action_id=action_id,
        )  # fmt: skip
        claim.action = Action(pk=action_id, adventure_id=branch.adventure_id, depth=depth)  # what is told of it
        out.setdefault(card_id, []).append(claim)
    for card_id, held in out.items():
        held.sort(key=lambda c: (c.action.depth, c.pk))
        out[card_id] = held[-LINE_CLAIMS_MAX:]
    return out


def cards_told(branch: Branch, cards: list[StoryCard]) -> tuple[list[StoryCard], dict[int, list[CardClaim]]]:
    """The cards as the prompt tells them: each one's text as the player wrote it and, under it, the
    claims that stand on the path; an alias that stands is one more key. The rows are not changed
    (copies in memory)."""
    told = told_on_path(branch, [c.pk for c in cards])
    if not told:
        return cards, told
    out = []
    for card in cards:
        held = told.get(card.pk)
        if held:
            card = StoryCard(**{f.attname: getattr(card, f.attname) for f in StoryCard._meta.concrete_fields})
            card.entry = (card.entry.rstrip() + "\n" + told_lines(held)).strip()
            aliases = [c.topic for c in held if c.slot == "alias"]
            card.keys = [*card.keys, *(a for a in aliases if a not in card.keys)]
        out.append(card)
    return out, told


# ---------------------------------------------------------------------------- what the player sees


def claim_dict(claim: CardClaim, *, standing: bool) -> dict:
    return {
        "id": claim.pk,
        "card": claim.card_id,
        "slot": claim.slot,
        "topic": claim.topic,
        "value": claim.value,
        "text": claim.text,
        "evidence": claim.action_id,
        "since": claim.action.depth,
        "state": claim.state,
        "standing": standing,
        "edited": claim.edited,
        "offline": claim.offline,
    }


def claims_of_cards(branch: Branch, card_ids: list[int]) -> dict[int, list[dict]]:
    """Every claim on the path for these cards, in story order, each saying whether it stands (the
    newest of its slot and topic) or was superseded."""
    claims = list(on_path(branch).filter(card_id__in=card_ids).select_related("action"))
    standing = {c.pk for c in _standing(c for c in claims if c.state != CardClaim.State.REJECTED).values()}
    out: dict[int, list[dict]] = {}
    for claim in sorted(claims, key=lambda c: (c.action.depth, c.pk)):
        out.setdefault(claim.card_id, []).append(claim_dict(claim, standing=claim.pk in standing))
    return out


def changes(branch: Branch) -> list[dict]:
    """What the story changed on this path, newest first (the Cards panel's review list)."""
    claims = on_path(branch).select_related("action", "card").order_by("-action__depth", "-id")[:200]
    standing = {c.pk for c in _standing(c for c in claims if c.state != CardClaim.State.REJECTED).values()}
    return [{**claim_dict(c, standing=c.pk in standing), "card_name": c.card.name} for c in claims]


def claim_of(adventure: Adventure, claim_id: int) -> CardClaim:
    """A claim of ``adventure``; NotFound for another's."""
    claim = CardClaim.objects.filter(pk=claim_id, adventure=adventure).select_related("action", "card").first()
    if claim is None:
        raise NotFound()
    return claim


def claim_accept(*, adventure: Adventure, claim_id: int) -> CardClaim:
    """The claim merged into the card's text (a card version from the node being played): the text
    says it from then on, in the player's words, and the claim is no longer told beside it."""
    with transaction.atomic():
        claim = claim_of(adventure, claim_id)
        if claim.state == CardClaim.State.ACCEPTED:
            return claim
        card = StoryCard.every.select_for_update().get(pk=claim.card_id)
        if not card.present:
            raise InvalidRequest(
                "this card is not on the branch played: bring it back (its history) before merging into it"
            )
        line = f"Since passage {claim.action.depth if claim.action_id else '?'}: {claim.value}."
        entry = (card.entry.rstrip() + "\n" + line).strip()
        if len(entry) > CARD_ENTRY_MAX:
            raise InvalidRequest("the card's text is full: shorten it before merging this change into it")
        canon.card_update(card=card, entry=entry)
        claim.state = CardClaim.State.ACCEPTED
        claim.save(update_fields=["state"])
    return claim


def claim_reject(*, adventure: Adventure, claim_id: int) -> CardClaim:
    claim = claim_of(adventure, claim_id)
    CardClaim.objects.filter(pk=claim.pk).update(state=CardClaim.State.REJECTED)
    claim.state = CardClaim.State.REJECTED
    return claim


def claim_edit(*, adventure: Adventure, claim_id: int, value: str | None = None, text: str | None = None) -> CardClaim:
    """The player's own wording of a claim: it is theirs (edited), and told (applied)."""
    claim = claim_of(adventure, claim_id)
    if value is not None:
        claim.value = value
    if text is not None:
        claim.text = text
    claim.edited, claim.state = True, CardClaim.State.APPLIED
    claim.save(update_fields=["value", "text", "edited", "state"])
    return claim


def claims_apply_all(*, adventure: Adventure) -> int:
    """``claims_review`` turned off: what waited is told."""
    return CardClaim.objects.filter(adventure=adventure, state=CardClaim.State.PROPOSED).update(
        state=CardClaim.State.APPLIED
    )


def card_histories(branch: Branch, card_ids: list[int]) -> dict[int, list[dict]]:
    """Each card's versions, newest first, in brief (one query): where each hangs and which stands
    here (GET .../cards/{id}/history/ has the fields of each)."""
    from memory.models import CardVersion

    versions = list(CardVersion.objects.filter(card_id__in=card_ids).select_related("action").order_by("-id"))
    if not versions:
        return {}
    here = set(canon.on_path(branch, CardVersion).filter(card_id__in=card_ids).values_list("id", flat=True))
    told = {v.card_id: v for v in sorted((v for v in versions if v.pk in here), key=lambda v: (_depth(v), v.pk))}
    return {
        card_id: [
            {
                "id": v.pk,
                "depth": _depth(v) if (v.action_id or v.at_root) else None,
                "deleted": v.deleted,
                "on_path": v.pk in here,
                "told": told.get(card_id) is v and not v.deleted,
            }
            for v in versions
            if v.card_id == card_id
        ]
        for card_id in {v.card_id for v in versions}
    }


def _depth(version) -> int:
    return version.action.depth if version.action_id else 0
