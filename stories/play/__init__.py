"""Play: the story's use cases that reach into memory, and the only story modules that import it.
turns (a turn, a retry, a continue: a database step, the model awaited, a database step) and
changes (what a player changes in an adventure or their settings that memory keeps too: create,
import and export with memories, the player's own summary, the embedding model)."""
