"""How much memory this machine has: the one copy the size limits read."""

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
