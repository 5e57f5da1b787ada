"""How much memory this machine has, and the one budget the size limits check against.

Every size check that bounds memory (a prediction's samples, a served chunk, a
Laplace Hessian, a random-feature GP's matrices) refuses what would take over
half of the physical memory, through `check_bytes`.
"""

import os

# Assumed where the operating system does not say (not POSIX).
UNKNOWN_MEMORY_BYTES = 16 * 2**30


def memory_bytes():
    """Physical memory in bytes (UNKNOWN_MEMORY_BYTES where it cannot be read)."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
        return UNKNOWN_MEMORY_BYTES
    return total if total > 0 else UNKNOWN_MEMORY_BYTES


def check_bytes(needed, what, advice):
    """Raises ValueError if `needed` bytes are over half the machine's memory.

    The message reads "`what` would need X GiB, over half of this machine's
    memory (Y GiB); `advice`."
    """
    limit = memory_bytes() // 2
    if needed > limit:
        raise ValueError(f"{what} would need {needed / 2**30:.3g} GiB, over half of this "
                         f"machine's memory ({limit / 2**30:.3g} GiB); {advice}.")
