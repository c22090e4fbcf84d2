"""The post-turn pass's steps, in the order memory_pass.run takes them: blocks (due memories),
stale (blocks edited or hidden, written again), summary, then embedding (memory.embeddings) and
eviction. Each commits its own result and moves its mark by compare-and-set."""
