"""New cards the story asks for: a name that acts or is spoken to in PROPOSE_AFTER_BLOCKS blocks of a
path and that no card has (by its name, its keys or an alias that stands) is proposed as a card,
with its evidence (memory.models.CardProposal). Its type is guessed (a faction by its last word, else
a character), its keys are its names and titles; accepted, it becomes a card from the node being
played (a character joins the cast); rejected, it is never proposed again."""

from __future__ import annotations

import re

from django.db import transaction

from config.errors import InvalidRequest, NotFound
from memory.models import CardClaim, CardProposal
from memory.story import canon, claims
from memory.story.claims_reader import named_cards
from memory.story.marks import MEMORY_INTERVAL
from memory.story.scene import sentences_of
from stories.models import Action, Adventure, Branch, StoryCard
from stories.tree import lineage

PROPOSE_AFTER_BLOCKS = 3
EVIDENCE_MAX = 40  # action ids kept per proposal
NAMES_PER_BLOCK = 20

NAME = (
    r"(?P<name>(?:(?:Captain|Sergeant|Lord|Lady|Sir|Dame|Master|Mistress|Father|Mother|Brother|Sister|Old|"
    r"Doctor|Dr\.|Professor|Mr\.|Mrs\.|Ms\.|King|Queen|Prince|Princess|Uncle|Aunt)\s+)?[A-Z][a-z'’-]{2,}"
    r"(?:\s+[A-Z][a-z'’-]{2,})?)"
)
IRREGULAR_PAST = (  # a name then one of these acts, as "-s" and "-ed" verbs do
    r"said|told|read|sold|bought|came|went|took|gave|made|stood|sat|ran|saw|knew|thought|brought|held|left|kept|"
    r"felt|found|got|put|set|let|shook|spoke|wrote|drew|threw|grew|rose|fell|led|met|paid|swore|wore|tore|woke|"
    r"drank|ate|sang|rang|began|won|lost|hid|bit|caught|fought|taught|sought|slept|wept|crept|spent|sent|lent|"
    r"built|dealt|meant|heard|stole|froze|chose|drove|rode|struck|hung|stuck|swung|dug|fled|bled|fed|shot|lit|"
    r"slid|spun|cast|cut|hit|hurt|shut|strode|spat|knelt|leapt|bent|sank|swam|blew|flew|forgot|forgave|understood"
)
ACTS = re.compile(
    r"(?<![\w'’])"
    + NAME
    + r"(?:,[^,.;]{1,50},|\s+the\s+[a-z]+)?\s+(?:\w+ly\s+)?(?P<verb>(?:is|was|has|had|does|did|says|said|"
    r"asks|asked|nods|nodded|grins|grinned|shrugs|shrugged|laughs|laughed|sighs|sighed|"
    + IRREGULAR_PAST
    + r"|[a-z]{3,}(?:s|ed)))\b"
)
SPOKEN_TO = re.compile(
    r"\b(?:says?\s+to|said\s+to|asks?|asked|tells?|told|thanks?|thanked|nods?\s+to|nodded\s+to|turns?\s+to|"
    r"turned\s+to|calls?\s+(?:out\s+)?to|called\s+(?:out\s+)?to|whispers?\s+to|whispered\s+to|greets?|greeted|"
    r"pays|paid|hails?|hailed)\s+" + NAME
)
INTRODUCED = re.compile(r"\b(?:named|called)\s+" + NAME)
VOCATIVE_STRICT = re.compile(r"(?:^|,\s*)(?P<name>[A-Z][a-z'’-]{2,})\s*(?:[,!?.]|$)")
NOT_NAMES = set(
    """The A An He She They It His Her Their Its But And Then When As At In On By With Without For From To Of If
    So Yet Still After Before Now There Here This That These Those What Who Why How Where Nothing Everyone Someone
    Somebody Nobody Everything Something You I We My Your Our Once Later Soon Inside Outside Above Below Behind
    Beyond Across Only Even Just No Yes Not All Some Each Every Both Neither Either Most Many Few Other Another
    Such One Two Three Four Five Overhead Somewhere Suddenly Finally Meanwhile Tonight Today Tomorrow Yesterday
    Monday Tuesday Wednesday Thursday Friday Saturday Sunday January February March April May June July August
    September October November December God Gods Sir Lord Lady Captain Mother Father Sister Brother Master
    Mistress King Queen Prince Princess Doctor Professor Please Thank Thanks Well Oh Ah Hey Hello Goodbye Sorry
    Good Come Go Look Listen Wait Stop Help Run Aye Nay Perhaps Maybe Whatever While Until Because Though Although
    Since Again Together Alone Around Along Among Into Onto Upon Over Under Near Far Through Toward Towards Out
    Up Down Off Away Back Home North South East West Sure Fine Right Left Hmm Ugh Yeah Okay Alright Enough
    Dear Darling Friend Sergeant Uncle Aunt Old Young Little Big Mr Mrs Ms Dr""".split()
)
TITLES = set(
    "Captain Sergeant Lord Lady Sir Dame Master Mistress Father Mother Brother Sister Old Doctor Professor King Queen "
    "Prince Princess Uncle Aunt".split()
)
FACTION_WORDS = {
    "Guild", "Company", "Order", "Brotherhood", "Sisterhood", "Watch", "Legion", "Council", "Church", "Army",
    "Fleet", "Clan", "Court", "Guard", "Syndicate", "Cartel", "Circle", "Society", "League", "Crown",
}  # fmt: skip


def _name(raw: str) -> str | None:
    name = " ".join(raw.split())
    words = name.split()
    while words and words[-1] in NOT_NAMES:
        words.pop()
    if not words or all(w.rstrip(".") in NOT_NAMES for w in words) or words[0].endswith("ly"):
        return None
    if words[0] in NOT_NAMES and words[0] not in TITLES:
        words = words[1:]
    return " ".join(words) if words else None


def block_names(*, actions: list[Action], cards: list[StoryCard], name: str) -> dict[str, tuple[str, int]]:
    """The names that act or are spoken to in ``actions`` and that no card of ``cards`` has: {name:
    (guessed type, the first action naming it)}."""
    named = named_cards(cards)
    hero = {w.casefold() for w in name.split()} | {"you"}
    known = {re.sub(r"^the\s+", "", w.strip(), flags=re.I).casefold() for c in cards for w in [c.name, *c.keys]}
    out: dict[str, tuple[str, int]] = {}
    for sentence in sentences_of(actions, name=name):
        found = [*ACTS.finditer(sentence.narration), *SPOKEN_TO.finditer(sentence.narration)]
        found += INTRODUCED.finditer(sentence.narration)
        for quote in re.finditer(r"[\"“]([^\"”]{1,400})[\"”]", sentence.text):
            found += [m for m in VOCATIVE_STRICT.finditer(quote.group(1))]
        for match in found:
            candidate = _name(match["name"])
            if candidate is None or len(out) >= NAMES_PER_BLOCK:
                continue
            if (
                candidate.casefold() in hero
                or candidate.casefold() in known
                or any(n.pattern.search(candidate) for n in named)
            ):
                continue
            kind = "faction" if candidate.split()[-1] in FACTION_WORDS else "character"
            out.setdefault(candidate, (kind, actions[sentence.passage].pk))
    return out


def note(*, adventure: Adventure, names: dict[str, tuple[str, int]]) -> None:
    """Add this block's evidence to the names' proposals (in the block's transaction). A name that is
    another's last word ("Aldric", "Ser Aldric") is the same one: one proposal, both names its keys."""
    held = list(CardProposal.objects.filter(adventure=adventure))
    for candidate, (kind, action_id) in names.items():
        candidate = candidate[:100]
        proposal = next((p for p in held if same_name(p.name, candidate)), None)
        if proposal is None:
            proposal = CardProposal.objects.create(
                adventure=adventure, name=candidate, type=kind, keys=_keys(candidate), evidence=[action_id]
            )
            held.append(proposal)
            continue
        keys = list(dict.fromkeys([*proposal.keys, *_keys(candidate)]))[:10]
        evidence = proposal.evidence if action_id in proposal.evidence else [*proposal.evidence, action_id]
        if keys != proposal.keys or evidence != proposal.evidence:
            proposal.keys, proposal.evidence = keys, evidence[:EVIDENCE_MAX]
            CardProposal.objects.filter(pk=proposal.pk).update(keys=proposal.keys, evidence=proposal.evidence)


def same_name(a: str, b: str) -> bool:
    """One name is the other's last word(s): "Aldric" and "Ser Aldric", "Pell" and "Old Pell"."""
    x, y = a.casefold().split(), b.casefold().split()
    short, long_ = (x, y) if len(x) <= len(y) else (y, x)
    return long_[-len(short) :] == short


def _keys(name: str) -> list[str]:
    words = name.split()
    return [name] + ([words[-1]] if len(words) > 1 else [])


def proposed(branch: Branch) -> list[dict]:
    """The proposals that stand on this path: evidence in PROPOSE_AFTER_BLOCKS blocks or more of it,
    no card (nor alias that stands) by that name since."""
    rows = list(CardProposal.objects.filter(adventure_id=branch.adventure_id, state=CardProposal.State.PROPOSED))
    if not rows:
        return []
    ids = {a for p in rows for a in p.evidence}
    on_path = dict(lineage.story(branch).filter(pk__in=ids, depth__lte=branch.tip_depth).values_list("pk", "depth"))
    cards = list(StoryCard.objects.filter(adventure_id=branch.adventure_id))
    named = named_cards(cards)
    aliases = {
        c.topic.casefold() for c in claims.on_path(branch).filter(slot="alias").exclude(state=CardClaim.State.REJECTED)
    }
    out = []
    for p in rows:
        evidence = sorted((on_path[a], a) for a in p.evidence if a in on_path)
        if len({(d - 1) // MEMORY_INTERVAL for d, _ in evidence}) < PROPOSE_AFTER_BLOCKS:
            continue
        if p.name.casefold() in aliases or any(n.pattern.fullmatch(p.name) for n in named):
            continue
        out.append({"id": p.pk, "name": p.name, "type": p.type, "keys": p.keys, "evidence": [a for _, a in evidence]})
    return out


def proposal_of(adventure: Adventure, proposal_id: int) -> CardProposal:
    """A proposal of ``adventure``; NotFound for another's."""
    proposal = CardProposal.objects.filter(pk=proposal_id, adventure=adventure).first()
    if proposal is None:
        raise NotFound()
    return proposal


def proposal_accept(*, adventure: Adventure, proposal_id: int, type: str | None = None) -> StoryCard:
    """The proposal becomes a card from the node being played (a character joins the cast)."""
    with transaction.atomic():
        proposal = CardProposal.objects.select_for_update().filter(pk=proposal_id, adventure=adventure).first()
        if proposal is None:
            raise NotFound()
        if proposal.state != CardProposal.State.PROPOSED:
            raise InvalidRequest(f"this proposal was already {proposal.state}")
        kind = type or proposal.type
        first = Action.objects.filter(pk__in=proposal.evidence).order_by("depth").first()
        entry = f"{proposal.name} (first met in passage {first.depth})." if first else proposal.name
        card = canon.card_create(
            adventure=adventure,
            type=kind,
            name=proposal.name,
            keys=proposal.keys,
            entry=entry,
            in_cast=kind == StoryCard.Type.CHARACTER,
        )
        CardProposal.objects.filter(pk=proposal.pk).update(state=CardProposal.State.ACCEPTED, card=card)
        _claims_backfill(adventure, card, proposal.evidence)
    return card


def _claims_backfill(adventure: Adventure, card: StoryCard, evidence: list[int]) -> None:
    """A new card's claims from the blocks already read that name it (its evidence's blocks)."""
    from memory.story.summarize import protagonist

    head = lineage.head(adventure)
    depths = set(lineage.story(head).filter(pk__in=evidence).values_list("depth", flat=True))
    blocks = sorted({(d - 1) // MEMORY_INTERVAL for d in depths})
    cards = list(StoryCard.objects.filter(adventure=adventure))
    for block in blocks:
        start = block * MEMORY_INTERVAL + 1
        actions = list(lineage.story(head).filter(depth__gte=start, depth__lt=start + MEMORY_INTERVAL))
        read = claims.block_read(
            adventure=adventure, head=head, actions=actions, cards=cards, name=protagonist(adventure)
        )
        claims.block_store(adventure=adventure, reads=[r for r in read if r.card_id == card.pk])


def proposal_reject(*, adventure: Adventure, proposal_id: int) -> None:
    proposal = proposal_of(adventure, proposal_id)
    CardProposal.objects.filter(pk=proposal.pk).update(state=CardProposal.State.REJECTED)
