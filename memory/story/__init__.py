"""A story's memory: the post-turn pass (bank), blocks and the characters' memories (cast), the
running summary (summaries, summarize), recall for a turn (retrieval), following the tree (sync),
the player's bank (memories) and its REST edge. Shares the vectors and models of memory/ with
memory.agents."""
