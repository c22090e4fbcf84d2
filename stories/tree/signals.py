"""The story tree's signals, sent by stories.tree.writes inside the writing transaction, so listeners
(memory.sync) commit or roll back with the change. Listeners import them from stories.tree.writes."""

from __future__ import annotations

from django.dispatch import Signal

# Sent inside the writing transaction, so listeners commit or roll back with it.
# story_rewritten: nodes of branch_id changed from from_depth on; change is
#   "removed" (undo/delete: later nodes moved up one depth), "replaced" (another
#   take became live), "edited" (the live take's text changed) or "hidden" (a
#   moderator hid, or showed again, the live take: the story skips or reads it).
# nodes_copied: the nodes of from_branch_id at ``depths`` now also stand, as
#   copies, on to_branch_id (copy-on-write); whatever hangs off them follows.
story_rewritten = Signal()
nodes_copied = Signal()
# head_moved: the adventure's head is now branch_id (a checkout, or a fork played at once).
head_moved = Signal()
