"""What one run of the post-turn pass did, and whether its errors are worth a retry soon."""

from __future__ import annotations

from dataclasses import dataclass, field

TRANSIENT_CODES = {"timeout", "unreachable", "rate_limited", "endpoint_error"}  # worth retrying soon


@dataclass
class PassReport:
    memories_created: int = 0
    summary_written: bool = False
    embedded: int = 0
    evicted: int = 0
    errors: list[str] = field(default_factory=list)
    transient: bool = False  # an error a retry in a little while may fix
    more_due: bool = False  # the run stopped at its cap with work left: the next pass is queued at once
    # the path's depth at which the next block (memory_next) and the next summary (summary_next) come due,
    # as the steps left the marks; None: not known (marks.quiet_until)
    memory_next: int | None = None
    summary_next: int | None = None

    def failed(self, message: str, code: str) -> None:
        self.errors.append(message)
        self.transient = self.transient or code in TRANSIENT_CODES
