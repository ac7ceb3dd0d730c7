"""Test sessions: a toy tokenizer and a gateway stand-in that replays turns.

The tokenizer cuts each message's canonical JSON into 4-character pieces, so
"tokens up to the cut are identical" is a real byte comparison, not a key check.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import accumulate
from types import MappingProxyType
from typing import Any

import pytest

from sakur4.engine import (
    Anchor,
    Checkpoints,
    Episode,
    Kind,
    Layout,
    Plan,
    PlanSettings,
    Policy,
    RenderedPrompt,
    Span,
    Tier,
    choose_profile,
    plan_turn,
    render_messages,
)
from sakur4.engine.profiles import Profile
from sakur4.errors import InputError


def count(text: str) -> int:
    """The injected token counter: about four characters a token."""
    return (len(text) + 3) // 4


def layout_of(prompt: RenderedPrompt, sizes: Sequence[int]) -> Layout:
    """The layout the toy server holds after ``prompt``: each message's span laid end to end.

    The gateway reads the real spans off the server's tokens (template tokens may sit
    between them); here the messages are contiguous, ``sizes`` tokens each.
    """
    ends = list(accumulate(sizes))
    return Layout(
        tuple(
            Span(key, end - size, end)
            for key, size, end in zip(prompt.keys, sizes, ends, strict=True)
        )
    )


def _pieces(text: str) -> list[str]:
    return [text[k : k + 4] for k in range(0, len(text), 4)]


def tokens_of(message: dict[str, Any]) -> list[str]:
    """A message's tokens: a role marker, its texts in 4-character pieces, two closers.

    Content is cut exactly as ``count`` counts it, and a message costs four tokens
    of template, as the planner's estimate assumes for messages it has not seen.
    """
    out = [f"<{message['role']}>", f"[{message.get('tool_call_id')}]"]
    if message.get("content") is not None:
        out.extend(_pieces(message["content"]))
    for c in message.get("tool_calls", ()):
        out.append(f"<call {c['id']} {c['function']['name']}>")
        out.extend(_pieces(c["function"]["arguments"]))
    out.extend(["</>", "\n"])
    return out


def prompt_tokens(prompt: RenderedPrompt) -> tuple[list[str], list[int]]:
    """The prompt's token stream and each message's size in it."""
    stream: list[str] = []
    sizes: list[int] = []
    for m in prompt.messages:
        t = tokens_of(m)
        stream.extend(t)
        sizes.append(len(t))
    return stream, sizes


def text_of(tokens: int, seed: int = 0) -> str:
    """Content that ``count`` sizes at exactly ``tokens``."""
    base = f"w{seed} lorem ipsum dolor sit amet {seed} "
    body = (base * (tokens * 4 // len(base) + 1))[: tokens * 4]
    return body


def message(i: int, role: str, tokens: int, **kw: object) -> Episode:
    return Episode(i, role, Kind.MESSAGE, text_of(tokens, i), tokens, **kw)  # type: ignore[arg-type]


def call(i: int, call_id: str, tokens: int = 10, tool: str = "read_file") -> Episode:
    return Episode(
        i,
        "assistant",
        Kind.TOOL_CALL,
        json.dumps({"q": text_of(tokens, i)}),
        count(json.dumps({"q": text_of(tokens, i)})),
        tool_name=tool,
        tool_call_id=call_id,
    )


def result(
    i: int, call_id: str, tokens: int, call_episode: int, tool: str = "read_file", **kw: object
) -> Episode:
    return Episode(
        i,
        "tool",
        Kind.TOOL_RESULT,
        text_of(tokens, i),
        tokens,
        tool_name=tool,
        tool_call_id=call_id,
        depends_on=(call_episode,),
        **kw,  # type: ignore[arg-type]
    )


@dataclass
class Session:
    """A gateway stand-in: plans, applies, renders, 'sends', and remembers the layout."""

    window: int
    profile: Profile = field(default_factory=lambda: choose_profile("detected"))
    checkpoints: str = "every"  # every | none | ring
    cut_tolerance: int = 4096
    live_results: int = 1
    tidy_budget: int = 128
    episodes: list[Episode] = field(default_factory=list)
    anchors: list[Anchor] = field(default_factory=list)
    layout: Layout | None = None
    sent: list[str] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    ring_extra: Sequence[int] = ()

    def resume_points(self) -> Checkpoints:
        if self.checkpoints == "every":
            return Checkpoints.every()
        if self.checkpoints == "none":
            return Checkpoints.none()
        starts = [s.start for s in self.layout.spans] if self.layout else []
        extra = [starts[k % len(starts)] for k in self.ring_extra] if starts else []
        return Checkpoints.at([*self.ends, *extra])

    def plan(self) -> Plan:
        return plan_turn(
            self.episodes,
            self.settings,
            anchors=self.anchors,
            layout=self.layout,
            checkpoints=self.resume_points(),
            count=count,
        )

    @property
    def settings(self) -> PlanSettings:
        policy = Policy(
            live_results=self.live_results,
            tidy_budget=self.tidy_budget,
            cut_tolerance=self.cut_tolerance,
        )
        return PlanSettings(self.window, self.profile, policy)

    def apply(self, plan: Plan) -> RenderedPrompt:
        """Render after ``plan``, record the layout, then store the plan's tiers."""
        prompt = render_messages(self.episodes, self.anchors, plan)
        self.episodes = [replace(e, tier=plan.tier_of(e)) for e in self.episodes]
        stream, sizes = prompt_tokens(prompt)
        self.layout = layout_of(prompt, sizes)
        self.sent = stream
        self.ends.append(len(stream))
        return prompt

    def warm(self, new: Iterable[Episode] = ()) -> RenderedPrompt:
        """Send the episodes as they are, with no steps: a cache to plan against."""
        self.episodes.extend(new)
        plan = self.plan()
        still = replace(plan, steps=(), moves=MappingProxyType({}), joined_anchors=())
        return self.apply(still)

    def turn(self, new: Iterable[Episode] = ()) -> tuple[Plan, RenderedPrompt]:
        self.episodes.extend(new)
        plan = self.plan()
        return plan, self.apply(plan)

    def tiers(self) -> dict[int, Tier]:
        return {e.id: e.tier for e in self.episodes}


def start_of(layout: Layout, episode_id: int) -> int | None:
    """Where the message showing ``episode_id`` starts in ``layout`` (None: not shown)."""
    for span in layout.spans:
        if span.key.startswith(("head|", "riding|")):
            continue
        if any(part.split(".")[0] == str(episode_id) for part in span.key.split(",")):
            return span.start
    return None


def error_text(call: Callable[[], object]) -> str:
    """The words of the InputError ``call`` raises, whole: ``pytest.raises(match=...)`` is
    a regex search, so a message wrapped in other text still matched it, and these texts
    are what a user reads."""
    with pytest.raises(InputError) as caught:
        call()
    return str(caught.value)
