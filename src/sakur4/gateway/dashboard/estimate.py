"""What drop-oldest truncation would have re-processed for a session's turns, estimated
from its receipts and its stored messages (labelled an estimate wherever it is shown).

The receipts say what Sakur4 sent and what each step reclaimed, not what the client
sent. So the client's prompt at a turn is taken as the tokens sent plus every token
the steps so far reclaimed (the anchor block Sakur4 adds is counted in, a slight
overstatement of the client's prompt); what it grew by since the previous turn is
what the client appended, split over the turn's new messages (the session's episodes)
in proportion to their stored sizes. The head drop-oldest never drops — system
prompt, tool definitions, template — is the first prompt less its other messages.

Drop-oldest then runs as a harness runs it (:func:`~sakur4.engine.truncation.
oldest_to_drop`, the rule the demo and the benchmark use): below the trigger the
server re-processes what the turn appended; at or past it the oldest messages go
until the prompt is at the target, and since the first message after the head
changed, the server re-processes everything after the head (no KV shifting:
llama-server's ``--cache-reuse`` is off by default).

Where the receipts cannot carry this, :func:`estimate` says why instead of a number:
no answered turns, a window that changed mid-session, a client that rewrote or
dropped earlier messages itself (cache churn, a prompt that shrank), or no stored
messages to split the prompt by.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sakur4.engine.truncation import oldest_to_drop
from sakur4.receipts import Receipt

METHOD = (
    "estimate from the receipts and the stored messages: the client's prompt per turn is "
    "the tokens sent plus all the steps so far reclaimed; drop-oldest with the same "
    "trigger and target re-processes what each turn appends, and at each truncation "
    "everything after the head it keeps (system prompt and tool definitions: the first "
    "prompt less its messages), with no KV shifting"
)
_SYSTEM = ("system", "developer")


@dataclass(frozen=True)
class DropOldest:
    """The estimate, or why there is none (``reprefilled`` None)."""

    reprefilled: int | None
    truncations: int
    why: str


@dataclass(frozen=True)
class Message:
    """One stored message of the session: the turn that brought it, its role, its size."""

    turn: int
    role: str
    tokens: int


def sent_turns(receipts: Sequence[Receipt]) -> list[Receipt]:
    """The turns the server answered: refused ones sent nothing, failed ones never
    completed, one in flight has not yet (all left out of the comparison, on either
    side)."""
    return [r for r in receipts if r.outcome not in ("refused", "failed", "in flight")]


def _client_prompts(sent: Sequence[Receipt]) -> list[float]:
    """The client's own prompt at each sent turn: what was sent plus what the steps
    so far reclaimed."""
    out, reclaimed = [], 0
    for r in sent:
        reclaimed += sum(int(s.get("reclaimed", 0)) for s in r.steps)
        out.append(float(r.prompt_tokens + reclaimed))
    return out


def estimate(
    receipts: Sequence[Receipt],
    trigger: float | None,
    target: float | None,
    messages: Sequence[Message] = (),
) -> DropOldest:
    """Drop-oldest's re-processed tokens over the session's sent turns (see the module)."""
    sent = sent_turns(receipts)
    if not sent:
        return DropOldest(None, 0, "no turn of this session was answered yet")
    if trigger is None or target is None:
        return DropOldest(None, 0, f"the profile {sent[0].profile!r} has no known trigger")
    if len({r.context_window for r in sent}) > 1:
        return DropOldest(None, 0, "the context window changed during the session")
    churned = [r.turn for r in sent if r.turn_detail.churn or r.turn_detail.repairs]
    if churned:
        shown = ", ".join(str(t) for t in churned[:5])
        return DropOldest(
            None,
            0,
            f"the client rewrote earlier messages (turn {shown}): what it appended "
            "there is not in the receipts",
        )
    prompts = _client_prompts(sent)
    shrank = [r.turn for r, a, b in zip(sent[1:], prompts, prompts[1:], strict=False) if b < a]
    if shrank:
        return DropOldest(
            None,
            0,
            f"the client's prompt shrank at turn {shrank[0]} (it dropped messages itself): "
            "what it appended there is not known",
        )
    others = [m for m in messages if m.role not in _SYSTEM]
    if not [m for m in others if m.turn <= sent[0].turn]:
        return DropOldest(None, 0, "the session's messages are not in the store")
    window = sent[0].context_window
    high, low = trigger * window, target * window
    sizes: list[float] = []  # the messages after the head, oldest first, in tokens
    roles: list[str | None] = []
    start = 0  # the first message drop-oldest still sends
    head = previous = total = 0.0
    truncations = 0
    last_turn = None
    for n, (r, prompt) in enumerate(zip(sent, prompts, strict=True)):
        new = [m for m in others if (last_turn is None or m.turn > last_turn) and m.turn <= r.turn]
        last_turn = r.turn
        if n == 0:
            head = max(0.0, prompt - sum(m.tokens for m in new))
        # What the client appended (it never drops: its prompt is the head and every
        # message so far), split over the turn's new messages by their stored sizes.
        grown = prompt - head - sum(sizes)
        weight = sum(m.tokens for m in new)
        if not new or weight <= 0:
            new, weight = [Message(r.turn, "user", 1)], 1
        sizes += [grown * m.tokens / weight for m in new]
        roles += [m.role for m in new]
        kept = head + sum(sizes[start:])
        if kept >= high:
            start += oldest_to_drop(sizes[start:], roles[start:], kept - low)
            kept = head + sum(sizes[start:])
            total += kept - head if n else kept
            truncations += 1
        else:
            total += kept - previous if n else kept
        previous = kept
    return DropOldest(round(total), truncations, METHOD)
