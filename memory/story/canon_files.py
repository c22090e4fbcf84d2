"""The canon in an export document and back: every version of the plot essentials, the author's note
and the cards (memory.story.canon), the claims the story made on the cards (memory.story.claims) and
the cards it proposed (memory.story.proposals), each at its node of the exported tree. Declared
schemas check the whole part before a row is written; a node, branch or card the file does not
hold is a 400 naming it, and nothing is stored."""

from __future__ import annotations

from rest_framework import serializers

from config import serializer_fields as strict
from config.errors import InvalidRequest
from memory.models import CanonText, CardClaim, CardProposal, CardVersion
from memory.story.canon import CARD_FIELDS, FIELDS, canon_refresh
from memory.story.claims import SLOTS
from memory.story.proposals import EVIDENCE_MAX
from stories import cards, import_doc
from stories.models import LONG_TEXT_MAX, Action, Adventure, StoryCard

VERSIONS_MAX = 20_000  # versions of one document (texts and cards together), and claims
PROPOSALS_MAX = 2_000


class _Node(serializers.Serializer):
    """The action a version hangs off, as the export lists it: its branch (the file's id), its depth and
    its place among that node's takes (0: the first in the file)."""

    branch = strict.IntegerField(min_value=0, max_value=2**63 - 1)
    depth = strict.IntegerField(min_value=1, max_value=import_doc.DEPTH_MAX)
    take = strict.IntegerField(min_value=0, max_value=1000)


class _TextVersion(serializers.Serializer):
    field = strict.ChoiceField(choices=FIELDS)
    text = strict.TextField(max_length=LONG_TEXT_MAX, allow_blank=True, trim_whitespace=False)
    node = _Node(required=False, allow_null=True, default=None)
    at_root = strict.BooleanField(required=False, default=False)


class _CardFields(import_doc.CardDoc):
    present = None  # a version's fields are the card's, not where it stands


class _CardVersion(serializers.Serializer):
    card = strict.IntegerField(min_value=0, max_value=import_doc.IMPORT_CARDS_MAX, help_text="its place in 'cards'")
    fields = _CardFields()
    node = _Node(required=False, allow_null=True, default=None)
    at_root = strict.BooleanField(required=False, default=False)
    deleted = strict.BooleanField(required=False, default=False)


class _ClaimDoc(serializers.Serializer):
    card = strict.IntegerField(min_value=0, max_value=import_doc.IMPORT_CARDS_MAX, help_text="its place in 'cards'")
    node = _Node(allow_null=True, help_text="its evidence; null: undone away")
    slot = strict.ChoiceField(choices=SLOTS)
    topic = strict.TextField(max_length=100, allow_blank=True, required=False, default="")
    value = strict.TextField(max_length=200)
    text = strict.TextField(max_length=400, allow_blank=True)
    state = strict.ChoiceField(choices=CardClaim.State.choices, required=False, default=CardClaim.State.APPLIED)
    offline = strict.BooleanField(required=False, default=True)
    edited = strict.BooleanField(required=False, default=False)


class _ProposalDoc(serializers.Serializer):
    name = strict.TextField(max_length=100)
    type = strict.ChoiceField(choices=StoryCard.Type.choices, required=False, default=StoryCard.Type.CHARACTER)
    keys = serializers.ListField(child=strict.TextField(max_length=100), max_length=10, required=False, default=list)
    evidence = strict.list_of(_Node, max_length=EVIDENCE_MAX, required=False, default=list)
    state = strict.ChoiceField(choices=CardProposal.State.choices, required=False, default=CardProposal.State.PROPOSED)
    card = strict.IntegerField(
        min_value=0, max_value=import_doc.IMPORT_CARDS_MAX, allow_null=True, required=False, default=None
    )


class CanonDoc(serializers.Serializer):
    texts = strict.list_of(_TextVersion, required=False, default=list, max_length=VERSIONS_MAX)
    cards = strict.list_of(_CardVersion, required=False, default=list, max_length=VERSIONS_MAX)
    claims = strict.list_of(_ClaimDoc, required=False, default=list, max_length=VERSIONS_MAX)
    proposals = strict.list_of(_ProposalDoc, required=False, default=list, max_length=PROPOSALS_MAX)


def _node_ref(action: Action | None, takes: dict) -> dict | None:
    return None if action is None else {"branch": action.branch_id, "depth": action.depth, "take": takes[action.pk]}


def canon_export(*, adventure: Adventure) -> dict:
    """Every version of the adventure's texts and cards, on every branch (``card``: the card's place
    in the export's card list; ``node``: the action it hangs off, as the export lists the actions)."""
    takes, seen = {}, {}
    for pk, branch, depth in (
        Action.objects.filter(adventure=adventure)
        .order_by("branch_id", "depth", "created_at", "id")
        .values_list("pk", "branch_id", "depth")
    ):
        takes[pk] = seen.get((branch, depth), 0)
        seen[(branch, depth)] = takes[pk] + 1
    places = {
        pk: i
        for i, pk in enumerate(StoryCard.every.filter(adventure=adventure).order_by("id").values_list("pk", flat=True))
    }
    texts = CanonText.objects.filter(adventure=adventure).select_related("action").order_by("id")
    cards_ = CardVersion.objects.filter(adventure=adventure).select_related("action").order_by("id")
    actions = {a.pk: a for a in Action.objects.filter(adventure=adventure).only("branch_id", "depth")}
    claims = CardClaim.objects.filter(adventure=adventure).select_related("action").order_by("id")
    proposed = CardProposal.objects.filter(adventure=adventure).order_by("id")
    return {
        "claims": [
            {
                "card": places[c.card_id],
                "node": _node_ref(c.action, takes),
                **{k: getattr(c, k) for k in ("slot", "topic", "value", "text", "state", "offline", "edited")},
            }
            for c in claims
        ],
        "proposals": [
            {
                "name": p.name,
                "type": p.type,
                "keys": p.keys,
                "evidence": [_node_ref(actions[a], takes) for a in p.evidence if a in actions],
                "state": p.state,
                "card": places.get(p.card_id),
            }
            for p in proposed
        ],
        "texts": [
            {"field": v.field, "text": v.text, "node": _node_ref(v.action, takes), "at_root": v.at_root} for v in texts
        ],
        "cards": [
            {
                "card": places[v.card_id],
                "fields": v.fields,
                "node": _node_ref(v.action, takes),
                "at_root": v.at_root,
                "deleted": v.deleted,
            }
            for v in cards_
        ],
    }


def canon_document(data) -> dict | None:
    """The canon part of an export document, checked against ``CanonDoc`` (None when it has none)."""
    if not isinstance(data, dict) or data.get("canon") is None:
        return None
    return import_doc.check(CanonDoc, data["canon"], what="import: canon")


def canon_import(*, adventure: Adventure, doc: dict, branch_ids: dict[int, int], card_ids: list[int]) -> None:
    """Store an export's versions on the imported adventure's tree (in the import's transaction; a
    version naming a node, branch or card the file does not hold is InvalidRequest, undoing all)."""
    actions: dict[tuple[int, int], list[int]] = {}
    for pk, branch, depth in (
        Action.objects.filter(adventure=adventure)
        .order_by("branch_id", "depth", "id")
        .values_list("pk", "branch_id", "depth")
    ):
        actions.setdefault((branch, depth), []).append(pk)

    def node(ref, where: str) -> int | None:
        if ref is None:
            return None
        found = actions.get((branch_ids.get(ref["branch"]), ref["depth"]), [])
        if ref["take"] >= len(found):
            raise InvalidRequest(f"import: {where}.node names a node the file does not hold")
        return found[ref["take"]]

    texts = [
        CanonText(
            adventure=adventure,
            field=v["field"],
            text=v["text"],
            at_root=v["at_root"],
            action_id=node(v["node"], f"canon.texts[{n}]"),
        )
        for n, v in enumerate(doc["texts"])
    ]
    versions = []
    for n, v in enumerate(doc["cards"]):
        if v["card"] >= len(card_ids):
            raise InvalidRequest(f"import: canon.cards[{n}].card must be the place of a card in 'cards'")
        fields = {k: v["fields"][k] for k in CARD_FIELDS}
        fields["keys"], fields["notes"] = cards.clean_keys(fields["keys"]), fields["notes"] or ""
        versions.append(
            CardVersion(
                adventure=adventure,
                card_id=card_ids[v["card"]],
                fields=fields,
                deleted=v["deleted"],
                at_root=v["at_root"],
                action_id=node(v["node"], f"canon.cards[{n}]"),
            )
        )
    claims = []
    for n, c in enumerate(doc["claims"]):
        if c["card"] >= len(card_ids):
            raise InvalidRequest(f"import: canon.claims[{n}].card must be the place of a card in 'cards'")
        fields = {k: c[k] for k in ("slot", "topic", "value", "text", "state", "offline", "edited")}
        claims.append(
            CardClaim(
                adventure=adventure,
                card_id=card_ids[c["card"]],
                action_id=node(c["node"], f"canon.claims[{n}]"),
                **fields,
            )
        )
    proposed = []
    for n, p in enumerate(doc["proposals"]):
        if p["card"] is not None and p["card"] >= len(card_ids):
            raise InvalidRequest(f"import: canon.proposals[{n}].card must be the place of a card in 'cards'")
        evidence = [node(ref, f"canon.proposals[{n}].evidence[{i}]") for i, ref in enumerate(p["evidence"])]
        proposed.append(
            CardProposal(
                adventure=adventure,
                name=p["name"],
                type=p["type"],
                keys=p["keys"],
                evidence=evidence,
                state=p["state"],
                card_id=None if p["card"] is None else card_ids[p["card"]],
            )
        )
    if len({p.name for p in proposed}) != len(proposed):
        raise InvalidRequest("import: canon.proposals name one name twice")
    CanonText.objects.bulk_create(texts)
    CardVersion.objects.bulk_create(versions)
    CardClaim.objects.bulk_create(claims)
    CardProposal.objects.bulk_create(proposed)
    canon_refresh(adventure.pk)
