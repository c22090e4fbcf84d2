"""Agent memory for multi-agent worlds: worlds and their tokens, events fanned out into memories,
recall (and its SQL), each large agent's own index, upkeep (embed, consolidate), export, time cues,
and the REST and MCP edges. Shares the vectors and models of memory/ with memory.story."""
