"""Drop-oldest truncation, the way harnesses keep a prompt in the window without Sakur4:
which of the oldest messages go.

One rule, shared by the demo's direct strategy (``demo/direct.py``), the offline
benchmark (``bench/offline.py``) and the dashboard's estimate of what drop-oldest
would have re-processed (``gateway/dashboard/estimate.py``): whole messages leave
from the front (after the system prompt, which stays) until the freed tokens cover
what was asked; a tool result leaves with its call, so dropping goes on while the
next message is a tool result; the newest message always stays.
"""

from __future__ import annotations

from collections.abc import Sequence


def oldest_to_drop(sizes: Sequence[float], roles: Sequence[str | None], need: float) -> int:
    """How many messages to drop from the front of ``sizes`` (the messages after the
    system prompt, oldest first, in tokens) to free ``need`` tokens (see the module)."""
    freed, k = 0.0, 0
    while k < len(sizes) - 1 and (freed < need or roles[k] == "tool"):
        freed += sizes[k]
        k += 1
    return k
