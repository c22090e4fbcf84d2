from tests.support.story import grow, memory_reply  # noqa: F401  (used by the memory tests)
