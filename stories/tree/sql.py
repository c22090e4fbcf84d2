"""The tree's hand-written statements: a node appended in one round trip (a turn appends
two). Called only by ``stories.tree.writes.place``."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from django.db import connection, transaction
from django.utils import timezone

from stories.models import Action, Branch


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

# A node is appended in one statement (a turn appends two; measured: six statements, then two in a
# transaction, BEGIN and COMMIT their own round trips). In order: the adventure row's lock, which
# serializes tree writes and answers the generation check and the head; the branch's tip moved on where
# no other generation holds the story; the node inserted there; what undo kept to redo on the branch
# forgotten (a new node ends it, a redo does not); and the row stamped changed, freeing a generation's
# claim (its reply) in the same write. A step that finds nothing leaves every later one nothing to do,
# so a refused append changes no row. One statement reads the rows of its snapshot, taken before it
# waits for the lock: a write committed meanwhile (an undo's redo rows) would be missed. So it runs
# alone only for a generation holding its claim (taken in an earlier statement, under the same lock;
# every tree write after it is refused by the check), and after ``lock_row`` in a transaction otherwise.
PLACE_SQL = """
WITH old AS (SELECT id, head_branch_id, generation_token, generation_until
             FROM stories_adventure WHERE id = %(adventure)s FOR UPDATE),
     free AS (SELECT id, head_branch_id FROM old
              WHERE generation_until IS NULL OR generation_until <= %(now)s OR generation_token = %(held)s),
     b AS (UPDATE stories_branch SET tip_depth = tip_depth + 1
           WHERE id = COALESCE(%(branch)s, (SELECT head_branch_id FROM free)) AND adventure_id = %(adventure)s
             AND EXISTS (SELECT 1 FROM free) AND (%(kind)s <> 'start' OR tip_depth = 0)
           RETURNING id, adventure_id, parent_id, fork_depth, lineage, tip_depth, name, internal, created_at),
     n AS (INSERT INTO stories_action (adventure_id, branch_id, depth, kind, text, live, hidden, created_at,
                                       author_id, actor, seen_by, heard_by)
           SELECT b.adventure_id, b.id, b.tip_depth, %(kind)s, %(text)s, true, %(hidden)s, %(now)s,
                  %(author_id)s, %(actor)s, %(seen_by)s, %(heard_by)s FROM b
           RETURNING id),
     r AS (DELETE FROM stories_redoturn WHERE %(ends_redo)s AND branch_id = (SELECT id FROM b)),
     a AS (UPDATE stories_adventure a SET updated_at = %(now)s,
             generation_token = CASE WHEN %(release)s <> '' AND old.generation_token = %(release)s THEN ''
                                     ELSE a.generation_token END,
             generation_until = CASE WHEN %(release)s <> '' AND old.generation_token = %(release)s THEN NULL
                                     ELSE a.generation_until END
           FROM old WHERE a.id = old.id AND EXISTS (SELECT 1 FROM b)
           RETURNING a.id)
SELECT EXISTS (SELECT 1 FROM free), old.head_branch_id, n.id, b.id, b.adventure_id, b.parent_id, b.fork_depth,
       b.lineage::text, b.tip_depth, b.name, b.internal, b.created_at
FROM old LEFT JOIN b ON true LEFT JOIN n ON true
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


def _placed(params: dict):
    with connection.cursor() as cursor:
        cursor.execute(PLACE_SQL, params)
        return cursor.fetchone()


def lock_row(adventure_id: int) -> None:
    """The adventure row's lock (inside a transaction): the tree's writes are serialized by it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM stories_adventure WHERE id = %s FOR UPDATE", [adventure_id])


@dataclass(frozen=True)
class Placed:
    """What PLACE_SQL found: whether no other generation held the story (``free``), the head as it
    stood, and the node (None: no such adventure, held, or no such branch for it)."""

    adventure: bool
    free: bool
    head_branch_id: int | None
    action: Action | None


def place_node(
    *,
    adventure_id: int,
    branch_id: int | None,
    kind: str,
    text: str,
    held: str,
    release: str = "",
    hidden: bool = False,
    ends_redo: bool = True,
    teller: Teller = OWNER,
) -> Placed:
    """Append a node after the tip of ``branch_id`` (None: the head, as it stands under the lock), in
    one statement (PLACE_SQL): the action's ``branch`` is the branch as it now stands. ``held``: the
    claim the caller's generation holds (its own writes pass the check; without one the lock is taken
    first, in a transaction); ``release``: a claim token
    freed in the same write. ``ends_redo``: False for a redo placing what undo took. ``teller``: a
    member's turn or a secret (``Teller``)."""
    now = timezone.now()
    params = {"branch": branch_id, "adventure": adventure_id, "kind": kind, "text": text, "now": now}
    params.update(asdict(teller))
    params.update(held=held, release=release, hidden=hidden, ends_redo=ends_redo)
    if held:  # a turn's: the statement alone (see PLACE_SQL)
        row = _placed(params)
    else:
        with transaction.atomic():  # the lock first: the statement's snapshot then holds every write before it
            lock_row(adventure_id)
            row = _placed(params)
    if row is None:
        return Placed(adventure=False, free=False, head_branch_id=None, action=None)
    free, head, action_id = row[0], row[1], row[2]
    if action_id is None:
        return Placed(adventure=True, free=free, head_branch_id=head, action=None)
    values = list(row[3:])
    values[4] = json.loads(values[4])  # lineage, read as text
    branch = Branch.from_db(connection.alias, BRANCH_FIELDS, values)
    action = Action(
        id=action_id,
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
    return Placed(adventure=True, free=free, head_branch_id=head, action=action)
