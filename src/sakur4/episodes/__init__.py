"""The episodic stream and recall (SPEC §6): what the gateway and MCP server call.

The stream is here; recall and vectors are imported from their own modules
(:mod:`.recall`, :mod:`.vectors`): they load numpy, which the gateway and a server
answering ``initialize`` should not pay for.
"""

from sakur4.episodes.model import Episode
from sakur4.episodes.stream import (
    NOTES_SESSION,
    forget_turn,
    last_turn,
    open_fold,
    record_episodes,
    remember,
    session_episodes,
    set_tiers,
)

__all__ = [
    "NOTES_SESSION",
    "Episode",
    "forget_turn",
    "last_turn",
    "open_fold",
    "record_episodes",
    "remember",
    "session_episodes",
    "set_tiers",
]
