"""The story tree: every write (writes.py, history.py for undo and redo, sql.py, storage.py for
copy-on-write between branches, signals.py for what memory hears), every read of a path
(lineage.py), one reply written at a time (generation.py), and the story as text (story_text.py)."""
