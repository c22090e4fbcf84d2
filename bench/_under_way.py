"""Stories under way, as a load bench finds them mid-evening: each bench player's story gets a history
(player turns and replies), the memories its past blocks left (embedded by the local model, as the
worker would), its summary, and its marks where a steady pass leaves them, so the memory work of
its next turns comes due at the rate it does in play (a block every MEMORY_INTERVAL actions, a
summary every SUMMARY_INTERVAL) and each turn ranks a real bank.

Until 2026-12-07 the load benches played fresh stories of one opening: a player's 2-3 turns in a
run never reached MEMORY_THRESHOLD, so no memory, summary or their embedding was ever due (74,012
evening turns in the bench's database had made 42 memory-writing calls) and the turns ranked an
empty bank: the figures left out the work the post-turn pass exists for."""

from __future__ import annotations

import random

DEPTH_MIN, DEPTH_MAX = 24, 160  # actions already on the path (12-80 turns in); uniform between
PLACES = ["the ford", "the mill", "the old tower", "Harrow market", "the salt road", "the chapel", "the quay"]
PEOPLE = ["Mara", "old Tobin", "the ferryman", "Captain Ilse", "Wren", "the miller's boy", "Sister Aud"]
SUMMARY = (
    "The travellers came to Harrow in the rain, asked after the sealed letter and learned that the road north"
    " is closed."
)
THINGS = ["a brass key", "the map", "a sealed letter", "the silver ring", "a lantern", "the ledger"]


def _reply(rng: random.Random, n: int) -> str:
    place, who, thing = rng.choice(PLACES), rng.choice(PEOPLE), rng.choice(THINGS)
    return (
        f"At {place} {who} waits in the rain. They speak of {thing} and of the storm of year {n}. "
        f"{who} says the road north is closed, that the toll keepers have doubled the fee, and that "
        f"whoever carries {thing} should not show it at {rng.choice(PLACES)}. A cart passes; somewhere a "
        "bell rings twice and the crowd thins."
    )


def _action(rng: random.Random) -> str:
    return f"I {rng.choice(['ask', 'follow', 'watch', 'pay'])} {rng.choice(PEOPLE)} about {rng.choice(THINGS)}"


def give_history(adventure_ids: list[int], *, seed: int) -> dict:
    """Each story a history of DEPTH_MIN-DEPTH_MAX actions (uniform) on its head branch, its past
    blocks' memories (each character of the cast its own of each block too), a summary, and both marks
    as a steady pass leaves them (the memory mark at the last whole block, 0-5 actions behind the tip;
    the summary's 0-14), so nothing is due until the players play. Returns counts."""
    from django.db import transaction
    from tqdm import tqdm

    from memory.embedder import LOCAL_MODEL, embed_local
    from memory.models import CastMark, Cursor, Memory, SummarySnapshot
    from memory.story.marks import MEMORY_INTERVAL, MEMORY_THRESHOLD, SUMMARY_INTERVAL, quiet_until
    from stories.models import Action, Adventure, Branch, StoryCard

    rng = random.Random(seed)
    texts = [_reply(rng, n)[:240] for n in range(64)]  # the bank's wordings, each embedded once
    vectors = embed_local(texts)
    heads = dict(Adventure.objects.filter(pk__in=adventure_ids).values_list("pk", "head_branch_id"))
    tips = dict(Branch.objects.filter(pk__in=heads.values()).values_list("pk", "tip_depth"))
    cast: dict[int, list[int]] = {}  # the players' characters (a story played together): their own memories
    for aid, card in StoryCard.objects.filter(
        adventure_id__in=adventure_ids, type=StoryCard.Type.CHARACTER, in_cast=True
    ).values_list("adventure_id", "pk"):
        cast.setdefault(aid, []).append(card)
    counts = {"stories": 0, "actions": 0, "memories": 0}
    batch = 200
    for i in tqdm(range(0, len(adventure_ids), batch), desc="stories under way", unit="batch"):
        actions, memories, cursors, marks, snapshots, depths = [], [], [], [], [], {}
        for aid in adventure_ids[i : i + batch]:
            head = heads[aid]
            first, depth = tips[head] + 1, rng.randint(DEPTH_MIN, DEPTH_MAX)
            for d in range(first, depth + 1):
                mine = d % 2 == 0
                actions.append(
                    Action(
                        adventure_id=aid,
                        branch_id=head,
                        depth=d,
                        kind="do" if mine else "ai",
                        text=_action(rng) if mine else _reply(rng, d),
                    )
                )
            # the last whole block's end: 0-5 actions behind the tip (uniform with the depth), none due yet
            mem = MEMORY_THRESHOLD + (depth - MEMORY_THRESHOLD) // MEMORY_INTERVAL * MEMORY_INTERVAL
            for end in range(MEMORY_THRESHOLD, mem + 1, MEMORY_INTERVAL):
                for card in [None, *cast.get(aid, [])]:  # the block's own memory, each character's
                    k = rng.randrange(len(texts))
                    memories.append(
                        Memory(
                            adventure_id=aid,
                            branch_id=head,
                            depth=end,
                            source_start=end - MEMORY_INTERVAL + 1,
                            source_end=end,
                            text=texts[k],
                            embedding=vectors[k],
                            embedding_model=LOCAL_MODEL,
                            offline=True,
                            character_id=card,
                            kind="witnessed" if card else "",
                        )
                    )
            marks += [CastMark(card_id=card, depth=mem) for card in cast.get(aid, [])]  # no backfill due
            summ = depth - rng.randint(0, SUMMARY_INTERVAL - 1)
            # the summary hangs off the node it covers up to, as a pass leaves it: its schedule counts from
            # there (without it every story's first pass wrote a summary: 839 in a run of 2,758 turns)
            snapshots.append(SummarySnapshot(adventure_id=aid, branch_id=head, depth=summ, text=SUMMARY))
            cursors.append(
                Cursor(
                    adventure_id=aid,
                    memory_branch_id=head,
                    memory_depth=mem,
                    summary_branch_id=head,
                    summary_depth=summ,
                    summary_base="",
                )
            )
            depths[head] = depth
        with transaction.atomic():
            Action.objects.bulk_create(actions, batch_size=2000)
            Memory.objects.bulk_create(memories, batch_size=2000)
            Cursor.objects.filter(adventure_id__in=[c.adventure_id for c in cursors]).delete()
            Cursor.objects.bulk_create(cursors)
            CastMark.objects.filter(card_id__in=[m.card_id for m in marks]).delete()
            CastMark.objects.bulk_create(marks)
            SummarySnapshot.objects.filter(adventure_id__in=[c.adventure_id for c in cursors]).delete()
            SummarySnapshot.objects.bulk_create(snapshots)
            for head, depth in depths.items():
                Branch.objects.filter(pk=head).update(tip_depth=depth)
            Adventure.objects.filter(pk__in=adventure_ids[i : i + batch]).update(story_summary=SUMMARY)
        for cursor in cursors:  # and what that pass said: nothing is due before the next block or summary
            quiet_until(
                cursor.adventure_id, min(cursor.memory_depth + MEMORY_INTERVAL, cursor.summary_depth + SUMMARY_INTERVAL)
            )
        counts["stories"] += len(depths)
        counts["actions"] += len(actions)
        counts["memories"] += len(memories)
    return counts
