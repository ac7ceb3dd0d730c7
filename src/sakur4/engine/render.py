"""The prompt the server receives: head (preamble + anchor block), episodes, riders.

Message shapes follow the OpenAI chat format. The head is one system message —
the harness's leading system prompt, the preamble, the anchor block — because
several chat templates accept a single system message only. Anchors pinned after
the head was cached ride in a system message of their own: first sent at the end,
then kept at that place (so the server caches it like any message; moved to the
end every turn, it was re-processed on every call), until a plan that
re-processes the head anyway joins them to the block.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sakur4.engine.anchors import Anchor, render_anchor_block
from sakur4.engine.episode import Episode
from sakur4.engine.folds import PREAMBLE, rendering, shown_text
from sakur4.engine.messages import group_key, head_key, riding_key, shape_of, visible_tiers
from sakur4.engine.plan import Plan
from sakur4.vocabulary import Kind, Tier

Message = dict[str, Any]
# Riders are the conversation's last message; a template that rejects a late
# system message needs another role here.
RIDER_ROLE = "system"


@dataclass(frozen=True, slots=True)
class RenderedPrompt:
    """The messages to send, and each one's key for the layout the gateway records."""

    messages: tuple[Message, ...]
    keys: tuple[str, ...]


# A message as the render memo knows it: its members, each at the tier it shows.
_Members = tuple[Episode, Tier] | tuple[tuple[Episode, Tier], ...]


class RenderMemo:
    """The messages one session's last render built, each under its members and the
    tier each showed: the next render builds only the messages whose episodes or tiers
    changed. A rendering is a pure function of (episode, tier), so equal members give
    the same key and bytes; a changed episode is another object (another key), so it
    misses alone. Holds one render's messages (what the last render used), no more."""

    def __init__(self) -> None:
        self.messages: dict[_Members, tuple[str, Message | None]] = {}


def render_messages(
    episodes: Sequence[Episode],
    anchors: Sequence[Anchor],
    plan: Plan,
    memo: RenderMemo | None = None,
) -> RenderedPrompt:
    """Render the prompt after ``plan``: same episodes at the same tiers, same bytes.

    ``memo``: the session's last render, whose unchanged messages are taken again.
    Raises AnchorBudgetError (through :func:`render_anchor_block`) rather than
    send a prompt without a pinned anchor.
    """
    in_block = set(plan.block_anchors)
    riding = [a.id for a in anchors if a.id not in in_block]
    block = render_anchor_block(anchors, plan.anchor_budget, riding)
    shape = shape_of(episodes)
    shown = visible_tiers(episodes, [plan.tier_of(e) for e in episodes], shape)

    parts = [shown_text(episodes[i], shown[i]) for i in shape.head if shown[i].shown]
    preamble = plan.preamble or PREAMBLE
    parts.append(preamble)
    if block.head:
        parts.append(block.head)
    messages: list[Message] = [{"role": "system", "content": "\n\n".join(parts)}]
    keys = [head_key(shape.head, episodes, shown, block.head_ids, block.head, preamble)]
    archived = Tier.ARCHIVED
    bounds = [*shape.starts, len(episodes)]
    rider_at = plan.rider_at if block.riding else None
    last = memo.messages if memo is not None else {}
    used: dict[_Members, tuple[str, Message | None]] = {}
    for g in range(len(shape.starts)):
        a, b = bounds[g], bounds[g + 1]
        if b - a == 1 and shown[a] >= archived:
            continue  # most of a long session: nothing shown, no message
        members = range(a, b)
        mk: _Members = (
            (episodes[a], shown[a])
            if b - a == 1
            else tuple((episodes[i], shown[i]) for i in members)
        )
        built = last.get(mk)
        if built is None:
            key = group_key(members, episodes, shown)
            built = (key, _message(members, episodes, shown) if key else None)
        used[mk] = built
        key, message = built
        if message is not None:
            if rider_at is not None and a >= rider_at:
                _ride(block.riding, messages, keys)
                rider_at = None
            messages.append(dict(message))  # a copy: the memo's own is never sent
            keys.append(key)
    if memo is not None:
        memo.messages = used
    if block.riding and (rider_at is not None or plan.rider_at is None):
        _ride(block.riding, messages, keys)
    return RenderedPrompt(tuple(messages), tuple(keys))


def _ride(riding: str, messages: list[Message], keys: list[str]) -> None:
    messages.append({"role": RIDER_ROLE, "content": riding})
    keys.append(riding_key(riding))


def _joined(members: Sequence[int], episodes: Sequence[Episode], shown: Sequence[Tier]) -> str:
    """A message's text: its slices joined (a harness message split by nature). A folded
    slice keeps the whitespace that ended it, so the next one starts on its own line."""
    if len(members) == 1:
        return shown_text(episodes[members[0]], shown[members[0]])
    out = []
    for i in members:
        e, tier = episodes[i], shown[i]
        if tier.shown:
            text = shown_text(e, tier)
            if rendering(e, tier) is not Tier.LIVE:
                text += e.content[len(e.content.rstrip()) :]
            out.append(text)
    return "".join(out)


def _message(members: Sequence[int], episodes: Sequence[Episode], shown: Sequence[Tier]) -> Message:
    first = episodes[members[0]]
    if first.kind == Kind.TOOL_RESULT:
        return {
            "role": "tool",
            "tool_call_id": first.tool_call_id,
            "content": shown_text(first, shown[members[0]]),
        }
    if first.kind != Kind.TOOL_CALL and first.role != "assistant":
        return {"role": first.role, "content": _joined(members, episodes, shown)}
    text: str | None = None
    calls: list[dict[str, Any]] = []
    for i in members:
        e, tier = episodes[i], shown[i]
        if not tier.shown:
            continue
        if e.kind == Kind.TOOL_CALL:
            arguments = shown_text(e, tier)
            calls.append(
                {
                    "id": e.tool_call_id,
                    "type": "function",
                    "function": {"name": e.tool_name, "arguments": arguments},
                }
            )
        else:
            text = shown_text(e, tier)
    message: Message = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    return message
