"""Per-session state the gateway keeps: the server slot, and what the server holds.

The server does not expose its cached tokens, so the gateway remembers the exact
prompts it sent for each session (their token layout) and predicts the server's
resume points from them; what the server then reports corrects the prediction.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sakur4 import engine
from sakur4.backends.checkpoints import CheckpointRules, SentPrompt, predict_slot

# Kept per session: enough history for the checkpoint ring (at most 32 live
# checkpoints, each from some earlier request) without growing without bound.
MAX_SENT = 48


def derive_session(messages: Sequence[Mapping[str, Any]]) -> str:
    """A stable id for a conversation that did not name its session: its opening.

    The system prompt and the first user message identify a harness conversation;
    later turns resend them unchanged.
    """
    opening = []
    for m in messages:
        opening.append({"role": m.get("role"), "content": m.get("content")})
        if m.get("role") == "user":
            break
    digest = hashlib.sha256(json.dumps(opening, sort_keys=True, default=str).encode())
    return "conv-" + digest.hexdigest()[:16]


@dataclass
class SessionState:
    """What the gateway knows about one session's slot on the server."""

    project_id: int
    session: str
    slot: int | None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    turn: int = 0
    # The turn number was read from the store once (after a restart it goes on).
    resumed: bool = False
    layout: engine.Layout | None = None
    sent: list[SentPrompt] = field(default_factory=list)
    # Exact prompt tokens per estimated token, from the last prompt sent: sizes
    # stubs and new messages between exact measurements.
    ratio: float = 1.0
    # The messages of the last turn sent, as recorded: cache churn is found against them.
    harness: list[dict[str, Any]] = field(default_factory=list)

    def checkpoints(self, source: str, rules: CheckpointRules) -> engine.Checkpoints:
        """Where the server can resume this session's cached prompt from."""
        if self.layout is None or not self.sent:
            return engine.Checkpoints.none()
        if source in ("exact-prefix", "kv-shift"):
            return engine.Checkpoints.every()
        if source == "checkpoint-ring" or source == "uncertain":
            prediction = predict_slot(self.sent, rules)
            candidates = [s.start for s in self.layout.spans] + [self.layout.end]
            return engine.Checkpoints.at(prediction.resume_positions(candidates))
        return engine.Checkpoints.none()

    def remember_sent(self, sent: SentPrompt) -> None:
        self.sent.append(sent)
        if len(self.sent) > MAX_SENT:
            del self.sent[: len(self.sent) - MAX_SENT]
