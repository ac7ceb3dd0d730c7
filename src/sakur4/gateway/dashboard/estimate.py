"""What drop-oldest truncation would have re-processed for a session's turns, estimated
from its receipts alone (labelled an estimate wherever it is shown).

The receipts say what Sakur4 sent and what each step reclaimed, not what the client
sent. So the client's prompt at a turn is taken as the tokens sent plus every token
the steps so far reclaimed (the anchor block and preamble Sakur4 adds are counted in,
a slight overstatement of the client's prompt). Drop-oldest with the same trigger and
target then works on that: below the trigger it only appends, and the server
re-processes what was appended; past it, the oldest messages go until the prompt is
at the target, and everything after the head is re-processed. The head is taken as
the whole first prompt — an upper bound on the system prompt and tools it keeps — so
drop-oldest is estimated at its cheapest, never inflated.

Where the receipts cannot carry this, :func:`estimate` says why instead of a number:
no sent turns, a window that changed mid-session, or a client that rewrote earlier
messages (cache churn) so that what it appended is not known.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sakur4.receipts import Receipt

METHOD = (
    "estimate from the receipts: the client's prompt per turn is the tokens sent plus "
    "all the steps so far reclaimed; drop-oldest with the same trigger and target "
    "re-processes what each turn appends, and at each truncation everything after the "
    "head (taken as the whole first prompt, so the estimate is drop-oldest at its cheapest)"
)


@dataclass(frozen=True)
class DropOldest:
    """The estimate, or why there is none (``reprefilled`` None)."""

    reprefilled: int | None
    truncations: int
    why: str


def sent_turns(receipts: Sequence[Receipt]) -> list[Receipt]:
    """The turns the server answered: refused ones sent nothing, failed ones never
    completed, one in flight has not yet (all left out of the comparison, on either
    side)."""
    return [r for r in receipts if r.outcome not in ("refused", "failed", "in flight")]


def estimate(
    receipts: Sequence[Receipt], trigger: float | None, target: float | None
) -> DropOldest:
    """Drop-oldest's re-processed tokens over the session's sent turns (see the module)."""
    sent = sent_turns(receipts)
    if not sent:
        return DropOldest(None, 0, "no turn of this session reached the server yet")
    if trigger is None or target is None:
        return DropOldest(None, 0, f"the profile {sent[0].profile!r} has no known trigger")
    if len({r.context_window for r in sent}) > 1:
        return DropOldest(None, 0, "the context window changed during the session")
    churned = [r.turn for r in sent if r.detail.get("churn") or r.detail.get("repairs")]
    if churned:
        shown = ", ".join(str(t) for t in churned[:5])
        return DropOldest(
            None,
            0,
            f"the client rewrote earlier messages (turn {shown}): what it appended "
            "there is not in the receipts",
        )
    window = sent[0].context_window
    high, low = trigger * window, target * window
    head = sent[0].prompt_tokens
    reclaimed = dropped = previous = total = truncations = 0
    for n, r in enumerate(sent):
        reclaimed += sum(int(s.get("reclaimed", 0)) for s in r.steps)
        kept = r.prompt_tokens + reclaimed - dropped
        if n == 0:
            total += kept
        elif kept > high:
            cut_to = max(int(low), head)
            dropped += max(0, kept - cut_to)
            kept = min(kept, cut_to)
            total += max(0, kept - head)
            truncations += 1
        else:
            total += max(0, kept - previous)
        previous = kept
    return DropOldest(total, truncations, METHOD)
