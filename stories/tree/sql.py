"""The tree's hand-written statements: a node appended in two round trips (a turn
appends two). Called only by ``stories.tree.writes.place``, inside its transaction."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from django.db import connection
from django.utils import timezone

from stories.models import Action, Adventure, Branch


@dataclass(frozen=True)
class Teller:
    """Who tells a node: a member's turn (stories.party) has its writer and their character's name; a
    secret (stories.party.secrets) the user ids who may read it and the characters in earshot (None: all)."""

    author_id: int | None = None
    actor: str = ""
    seen_by: list[int] | None = None
    heard_by: list[str] | None = None

    @classmethod
    def of(cls, node: Action) -> Teller:
        return cls(author_id=node.author_id, actor=node.actor, seen_by=node.seen_by, heard_by=node.heard_by)

    def secret(self) -> Teller:
        """The same secret with no author: the narrator's answer to it."""
        return Teller(seen_by=self.seen_by, heard_by=self.heard_by)


OWNER = Teller()  # the owner's turn, told to everyone

# A node is appended in two statements (a turn appends two; measured: six statements before). The
# adventure row's UPDATE takes the row lock that serializes tree writes, answers what the generation
# check reads and the head, and, for a generation placing its reply, frees its claim in the same write.
APPEND_LOCK_SQL = """
WITH old AS (SELECT id, head_branch_id, generation_token, generation_until
             FROM stories_adventure WHERE id = %(adventure)s FOR UPDATE)
UPDATE stories_adventure a SET updated_at = %(now)s,
  generation_token = CASE WHEN %(release)s <> '' AND old.generation_token = %(release)s THEN ''
                          ELSE a.generation_token END,
  generation_until = CASE WHEN %(release)s <> '' AND old.generation_token = %(release)s THEN NULL
                          ELSE a.generation_until END
FROM old WHERE a.id = old.id
RETURNING old.head_branch_id, old.generation_token, old.generation_until
"""
# The branch's tip moves on, the node is inserted there and (but for a redo) what undo kept to redo on
# the branch is forgotten: a new node ends it.
APPEND_SQL = """
WITH b AS (UPDATE stories_branch SET tip_depth = tip_depth + 1
           WHERE id = %(branch)s AND adventure_id = %(adventure)s AND (%(kind)s <> 'start' OR tip_depth = 0)
           RETURNING id, adventure_id, parent_id, fork_depth, lineage, tip_depth, name, internal, created_at),
     n AS (INSERT INTO stories_action (adventure_id, branch_id, depth, kind, text, live, hidden, created_at,
                                       author_id, actor, seen_by, heard_by)
           SELECT b.adventure_id, b.id, b.tip_depth, %(kind)s, %(text)s, true, %(hidden)s, %(now)s,
                  %(author_id)s, %(actor)s, %(seen_by)s, %(heard_by)s FROM b
           RETURNING id),
     r AS (DELETE FROM stories_redoturn WHERE %(ends_redo)s AND branch_id = (SELECT id FROM b))
SELECT n.id, b.id, b.adventure_id, b.parent_id, b.fork_depth, b.lineage::text, b.tip_depth, b.name, b.internal,
       b.created_at FROM n, b
"""
BRANCH_FIELDS = (
    "id",
    "adventure_id",
    "parent_id",
    "fork_depth",
    "lineage",
    "tip_depth",
    "name",
    "internal",
    "created_at",
)


def append_lock(*, adventure_id: int, release: str = "") -> Adventure | None:
    """Lock the adventure row (as ``tree.lock``) and stamp it changed; returns the row's head and
    claim as they were (for the generation check), or None when there is no such adventure.
    ``release``: a claim token freed in the same write (kept only if the transaction commits)."""
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(APPEND_LOCK_SQL, {"adventure": adventure_id, "now": now, "release": release})
        row = cursor.fetchone()
    if row is None:
        return None
    head, token, until = row
    return Adventure(
        pk=adventure_id, head_branch_id=head, generation_token=token, generation_until=until, updated_at=now
    )


def append_node(
    *,
    adventure_id: int,
    branch_id: int,
    kind: str,
    text: str,
    now,
    hidden: bool = False,
    ends_redo: bool = True,
    teller: Teller = OWNER,
) -> Action | None:
    """Move the branch's tip one on and insert the node there; the action's ``branch`` is the
    branch as it now stands. None when the branch is not this adventure's (or, for an opening,
    when the branch already has a node). ``ends_redo``: False for a redo placing what undo took.
    ``teller``: a member's turn or a secret (``Teller``)."""
    params = {"branch": branch_id, "adventure": adventure_id, "kind": kind, "text": text, "now": now}
    params.update(asdict(teller))
    with connection.cursor() as cursor:
        cursor.execute(APPEND_SQL, {**params, "hidden": hidden, "ends_redo": ends_redo})
        row = cursor.fetchone()
    if row is None:
        return None
    values = list(row[1:])
    values[4] = json.loads(values[4])  # lineage, read as text
    branch = Branch.from_db(connection.alias, BRANCH_FIELDS, values)
    action = Action(
        id=row[0],
        adventure_id=adventure_id,
        branch=branch,
        depth=branch.tip_depth,
        kind=kind,
        text=text,
        live=True,
        hidden=hidden,
        created_at=now,
        edited_at=None,
        **asdict(teller),
    )
    action._state.adding, action._state.db = False, connection.alias
    return action
