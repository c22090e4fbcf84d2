"""How many examples a fuzzer draws: all of them in `make test`, a tenth (at least 5) in
`make test-quick` (EVERLORE_QUICK_TESTS=1), so the developer's loop still runs every fuzzer."""

import os

QUICK = os.environ.get("EVERLORE_QUICK_TESTS") == "1"


def examples(full: int) -> int:
    return max(5, full // 10) if QUICK else full
