"""What a session carries from one turn to the next, so a turn works on what changed.

A harness resends the whole conversation every turn; all but its last few messages
are the ones it sent before. Each memo here keeps the last turn's result per message
and takes it again only for a message equal (``==``) to the one at its place last
turn: an edited or new message (and, where one was inserted or removed, every
message after it) is worked out again, so a memo is never staler than the messages
it is compared with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sakur4.episodes.natures import Part, classify


@dataclass
class Classified:
    """Each message's parts by nature (:func:`sakur4.episodes.natures.classify`), as the
    last turn classified them: a turn classifies only its new or changed messages
    (classifying all of them was ~6% of a turn at 100k tokens)."""

    harness: str = ""
    messages: list[Mapping[str, Any]] = field(default_factory=list)
    parts: list[list[Part]] = field(default_factory=list)

    def classify(self, messages: Sequence[Mapping[str, Any]], harness: str) -> list[Part]:
        """Every message as its parts, in order: what ``classify`` gives."""
        old = self.messages if harness == self.harness else []
        n = len(old)
        per = [
            self.parts[i] if i < n and m == old[i] else classify([m], harness)
            for i, m in enumerate(messages)
        ]
        self.harness, self.messages, self.parts = harness, list(messages), per
        return [p for ps in per for p in ps]
