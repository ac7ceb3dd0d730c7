"""The slot book: how many sessions each server slot serves, and what it was last sent.

Each session is pinned to a slot. What a slot holds is the last prompt any session sent
it: what a new conversation on that slot can reuse, and what a repair in the receipt is
measured against (the reuse the server would give without it).
"""

from __future__ import annotations

from dataclasses import dataclass

from sakur4.backends.resume import ResumeModel
from sakur4.backends.ring import CheckpointRules, SentPrompt, SlotPrediction, advance, empty_slot


@dataclass(frozen=True)
class SlotSent:
    """One slot's last prompt (any session's), the prediction after every prompt it was
    sent, and that last prompt's billing header (None: it had none)."""

    last: SentPrompt
    prediction: SlotPrediction
    header: str | None


class SlotBook:
    """Which slot each new session gets, and what each slot was last sent."""

    def __init__(self) -> None:
        self._users: dict[int, int] = {}
        self._sent: dict[int | None, SlotSent] = {}

    def assign(self, total: int | None) -> int | None:
        """A slot for a new session: the least used, so sessions rarely share a cache."""
        slots = total or 1
        if slots <= 1:
            return 0
        counts = [self._users.get(i, 0) for i in range(slots)]
        slot = counts.index(min(counts))
        self._users[slot] = counts[slot] + 1
        return slot

    def unassign_all(self) -> None:
        """Every session is given a slot again (the server's slot count changed)."""
        self._users.clear()

    def sent(self, slot: int | None) -> SlotSent | None:
        """What ``slot`` was last sent (None: nothing, or forgotten)."""
        return self._sent.get(slot)

    def record(
        self,
        slot: int | None,
        sent: SentPrompt,
        header: str | None,
        rules: CheckpointRules,
        advanced: tuple[SlotPrediction | None, SlotPrediction] | None = None,
    ) -> None:
        """``sent`` went to ``slot``: the slot's prediction moves on past it.

        ``advanced``: a prediction (None: an empty slot) and its advance past ``sent``,
        taken when it is the slot's (a session alone on its slot): replaying ``sent``
        again compared its 100k tokens with the slot's a second time each turn."""
        before = self._sent.get(slot)
        prediction = before.prediction if before is not None else None
        if advanced is not None and advanced[0] is prediction:
            after = advanced[1]
        else:
            after = advance(prediction or empty_slot(rules), sent)
        self._sent[slot] = SlotSent(sent, after, header)

    def put(self, slot: int, sent: SlotSent) -> None:
        """``slot`` holds ``sent`` again (a session's state restored there from its file)."""
        self._sent[slot] = sent

    def forget(self) -> None:
        """What every slot was predicted to hold belongs to a server that is gone."""
        self._sent.clear()

    def reuse_at(self, slot: int | None, divergence: int, model: ResumeModel) -> int:
        """Tokens the server would reuse on ``slot`` for a prompt that first differs from
        the slot's last one at ``divergence``, by the server's resume model."""
        held = self._sent.get(slot)
        if held is None:
            return 0
        return model.resume_at(divergence, len(held.last.tokens), held.prediction)
