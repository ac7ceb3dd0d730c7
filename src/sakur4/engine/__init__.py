"""The context engine: what the next prompt contains when the context must shrink.

Pure core (SPEC §13): no I/O, imports only the standard library and the
foundation (``sakur4.errors``; ``sakur4.vocabulary``, whose ``Tier`` and ``Kind`` the
store and the surfaces share). Per turn the gateway calls :func:`plan_turn` with the
session's episodes, anchors, the layout of the prompt the server last received
and its resume points; stores :attr:`Plan.steps`; renders with
:func:`render_messages`; and after sending records the prompt's :class:`Layout`
(each message's token span, as the server tokenized it) for next turn (the
layout also remembers which anchors the cached head holds, so an anchor pinned
mid-session rides at the tail until the head is re-processed).
:func:`choose_profile` turns the probe's checkpoint source (or
``SAKUR4_EVICTION_PROFILE``) into a profile.

Where each concept lives: ``tiers`` (the ladder's rules), ``episode`` (the input),
``folds`` (stubs and lines), ``messages`` (grouping, pairing, keys),
``anchors`` (the one anchor renderer), ``profiles``, ``cache`` (layout and
resume points), ``policy`` (the planner's choices and settings, one value), ``plan`` (the
decision and its verdict), ``candidates`` (protection and one-rung steps),
``planner`` (the cut), ``render`` (the message list).
"""

from sakur4.engine.anchors import Anchor, AnchorBlock, render_anchor_block
from sakur4.engine.cache import Checkpoints, Layout, Span
from sakur4.engine.episode import Episode
from sakur4.engine.plan import Plan, Verdict
from sakur4.engine.planner import plan_turn
from sakur4.engine.policy import DEFAULT_POLICY, PlanSettings, Policy
from sakur4.engine.profiles import Profile, choose_profile
from sakur4.engine.render import Message, RenderedPrompt, RenderMemo, render_messages
from sakur4.engine.tiers import Held, Step
from sakur4.vocabulary import Kind, Tier

__all__ = [
    "DEFAULT_POLICY",
    "Anchor",
    "AnchorBlock",
    "Checkpoints",
    "Episode",
    "Held",
    "Kind",
    "Layout",
    "Message",
    "Plan",
    "PlanSettings",
    "Policy",
    "Profile",
    "RenderMemo",
    "RenderedPrompt",
    "Span",
    "Step",
    "Tier",
    "Verdict",
    "choose_profile",
    "plan_turn",
    "render_anchor_block",
    "render_messages",
]
