"""Cache churn: text a harness changes between turns in an otherwise identical prefix.

A server can reuse a cached prompt only up to its first changed token, so one
volatile line near the top re-processes everything after it, every turn. This
module finds such changes, per session, by comparing a request's messages with
the ones sent for the session's previous turn, and repairs the known cases:

- ``billing-header``: Claude Code starts its system prompt with an
  ``x-anthropic-billing-header: …; cch=<hash>;`` line whose hash changes every
  request. It is billing metadata for Anthropic's API and means nothing to a
  local model, so it is dropped (always, so the first turn matches the next).
- ``system-reminder``: a message that differs from the version sent last turn
  only inside ``<system-reminder>`` blocks (a harness re-writing or removing a
  reminder in its history) is sent as it was last turn, and any reminder that is
  new in it goes to the end of the last message. A reminder is, by the harnesses'
  own definition, context for the current turn rather than the user's words, so
  its place in the history carries no meaning; the history keeps what the model
  saw at the time.

Which harness needs which repair, and the volatile line it opens its system prompt
with, each harness declares in its own file (:mod:`sakur4.harnesses`); the mechanisms
are here. Anything else that changes (a timestamp, unknown text) is reported, never
rewritten. Every repair and every change is returned as a :class:`Change` for
the receipt; nothing is changed silently. Pure: no I/O, no server.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sakur4.harnesses import REPAIRS, VOLATILE
from sakur4.harnesses.base import REMINDER, Repair

# The repairs some harness needs (Claude Code's: the billing header, its reminders).
KNOWN_REPAIRS: tuple[Repair, ...] = REPAIRS

_REMINDER_SPACED = re.compile(r"\s*" + REMINDER.pattern, REMINDER.flags)
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}|\d{1,2}:\d{2}(?::\d{2})?|\d{10,13}")
_EXCERPT = 80

ChangeKind = Repair | Literal["timestamp", "unknown"]


@dataclass(frozen=True)
class Change:
    """Text that changed since the session's previous turn (or was dropped as volatile).

    ``message``/``offset``: where the prompt would first differ without a repair
    (message index in the chat request, characters of unchanged text before it);
    ``before``/``after``: short excerpts of the changed text.
    """

    kind: ChangeKind
    message: int
    offset: int
    before: str
    after: str
    repaired: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "message": self.message,
            "offset": self.offset,
            "before": self.before,
            "after": self.after,
            "repaired": self.repaired,
        }


def _short(text: str) -> str:
    return text if len(text) <= _EXCERPT else text[: _EXCERPT - 1] + "…"


def drop_billing_header(system: str) -> tuple[str, str | None]:
    """The system prompt without a harness's volatile opening line (Claude Code's
    billing header), and the line dropped.

    The header is ``x-anthropic-billing-header:`` and ``key=value;`` fields
    (``cc_version=2.1.332.0b8; cc_entrypoint=sdk-cli;``, with ``cch=…;`` in some
    versions); the text after it starts the real prompt, on the same line when the
    system blocks were joined.
    """
    for volatile in VOLATILE:
        m = volatile.line.match(system)
        if m:
            return system[m.end() :], m.group(0)
    return system, None


def _text(m: Mapping[str, Any]) -> str | None:
    content = m.get("content")
    return content if isinstance(content, str) else None


def _first_difference(a: str, b: str) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _excerpts(a: str, b: str, start: int) -> tuple[str, str]:
    end = 0
    while end < min(len(a), len(b)) - start and a[-1 - end] == b[-1 - end]:
        end += 1
    return _short(a[start : len(a) - end]), _short(b[start : len(b) - end])


def classify(before: str, after: str, offset: int) -> ChangeKind:
    """What kind of change this is, from the text around its first differing character."""
    for text in (before, after):
        for m in REMINDER.finditer(text):
            if m.start() <= offset < m.end():
                return "system-reminder"
    for volatile in VOLATILE:
        if volatile.marker in before[: offset + 1] and volatile.changing in before:
            return volatile.repair
    window = slice(max(0, offset - 12), offset + 12)
    if _TIMESTAMP.search(before[window]) or _TIMESTAMP.search(after[window]):
        return "timestamp"
    return "unknown"


def _without_reminders(text: str) -> str:
    # Whitespace around a reminder goes with it: a moved reminder left a separator.
    return _REMINDER_SPACED.sub("", text).strip()


@dataclass(frozen=True)
class Repaired:
    """The messages to record and send, and what changed since the previous turn."""

    messages: list[dict[str, Any]]
    changes: tuple[Change, ...]


def repair_messages(
    messages: Sequence[Mapping[str, Any]],
    previous: Sequence[Mapping[str, Any]] | None,
    repairs: Collection[str] = KNOWN_REPAIRS,
) -> Repaired:
    """Compare ``messages`` with the ``previous`` turn's (as sent) and repair known churn.

    Stops at the first change it cannot repair: past it the server's cache is lost
    anyway, and what follows is the conversation growing.
    """
    out = [dict(m) for m in messages]
    if not previous:
        return Repaired(out, ())
    changes: list[Change] = []
    moved: list[str] = []
    last = len(out) - 1
    for k in range(min(len(previous), len(out))):
        old, new = previous[k], out[k]
        if old == new:
            continue
        a, b = _text(old), _text(new)
        offset = _first_difference(a, b) if a is not None and b is not None else 0
        same_frame = {x: y for x, y in old.items() if x != "content"} == {
            x: y for x, y in new.items() if x != "content"
        }
        if (
            "system-reminder" in repairs
            and k < last
            and same_frame
            and a is not None
            and b is not None
            and _without_reminders(a) == _without_reminders(b)
        ):
            # Keep the prefix as sent; deliver what is new in this message at the tail.
            out[k] = dict(old)
            old_reminders = set(REMINDER.findall(a))
            moved.extend(r for r in REMINDER.findall(b) if r not in old_reminders)
            before, after = _excerpts(a, b, offset)
            changes.append(Change("system-reminder", k, offset, before, after, True))
            continue
        kind = classify(a, b, offset) if a is not None and b is not None else "unknown"
        before, after = _excerpts(a, b, offset) if a is not None and b is not None else ("", "")
        changes.append(Change(kind, k, offset, before, after, False))
        break
    if moved:
        tail = out[last]
        text = _text(tail)
        if text is None or tail.get("role") == "assistant":
            # Nowhere to deliver them without changing meaning: send the messages as
            # they came, and report the churn as not repaired.
            unrepaired = tuple(
                Change(c.kind, c.message, c.offset, c.before, c.after, False) for c in changes
            )
            return Repaired([dict(m) for m in messages], unrepaired[:1])
        out[last] = {**tail, "content": "\n\n".join([text, *moved]) if text else "\n\n".join(moved)}
    return Repaired(out, tuple(changes))


def without_billing_header(
    messages: list[dict[str, Any]], enabled: bool
) -> tuple[list[dict[str, Any]], str | None]:
    """The messages with Claude Code's billing header dropped from their system prompt
    (when repairs are ``enabled``), and the header dropped (None: there was none)."""
    first = messages[0] if messages else {}
    if not enabled or first.get("role") != "system" or not isinstance(first.get("content"), str):
        return messages, None
    kept, header = drop_billing_header(first["content"])
    if header is None:
        return messages, None
    return [{**first, "content": kept}, *messages[1:]], header


def repaired(
    messages: list[dict[str, Any]], previous: Sequence[Mapping[str, Any]], enabled: bool
) -> Repaired:
    """This turn's messages against the ``previous`` turn's: known churn repaired when
    ``enabled``, every change listed either way."""
    if enabled:
        return repair_messages(messages, previous)
    return Repaired(messages, repair_messages(messages, previous, repairs=()).changes)
