"""The first keys of the site's Postgres advisory locks (``pg_advisory_xact_lock(space, id)``), one per
use and all in one place, so that two uses never share a key."""

IMPORT_SUBMIT = 29_001  # a player's import submissions, one at a time (play.imports); id: the player
AGENT_WORD_SAMPLE = 29_002  # an agent's word statistics taken anew (memory.agents.agent_words); id: the agent
IMPORT_RUN = 29_003  # a job a worker is importing: held while it runs (play.imports); id: the job
