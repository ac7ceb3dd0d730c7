"""Pinned anchors and the one function that renders them.

:func:`render_anchor_block` is the only code in Sakur4 that reads an anchor's
text: every prompt builder goes through it (``tests/engine/test_anchor_paths.py``
checks the engine's source for any other reader). The seed's version existed and
was never called — four prompt builders joined anchors themselves, with neither
the budget check nor the ordering.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from sakur4.errors import AnchorBudgetError, InputError

BLOCK_TITLE = "Pinned constraints (they survive compaction; follow them):"
RIDING_TITLE = "Pinned constraints added during this session (they survive compaction):"


@dataclass(frozen=True, slots=True)
class Anchor:
    """A pinned constraint. Higher ``priority`` renders first."""

    id: int
    text: str
    priority: int
    tokens: int


@dataclass(frozen=True, slots=True)
class AnchorBlock:
    """The rendered anchors: the block at the head and the riders at the tail."""

    head: str
    riding: str
    head_ids: tuple[int, ...]
    riding_ids: tuple[int, ...]
    tokens: int


def render_anchor_block(
    anchors: Sequence[Anchor], budget: int, riding: Collection[int] = ()
) -> AnchorBlock:
    """Render all pinned anchors by priority; raise AnchorBudgetError, never drop one.

    Anchors whose id is in ``riding`` were pinned after the head was cached: they
    render apart, for the tail, until the head is re-processed anyway. The budget
    covers every pinned anchor, riders included: a rider is still a constraint
    the preamble promises will survive.
    """
    ids = [a.id for a in anchors]
    if len(set(ids)) != len(ids):
        raise InputError("anchor ids must be unique")
    if any(a.tokens < 0 for a in anchors):
        raise InputError("anchor token counts must not be negative")
    needed = sum(a.tokens for a in anchors)
    if needed > budget:
        raise AnchorBudgetError(needed, max(budget, 0))
    ordered = sorted(anchors, key=lambda a: (-a.priority, a.id))
    texts: dict[bool, list[str]] = {False: [BLOCK_TITLE], True: [RIDING_TITLE]}
    for a in ordered:
        texts[a.id in riding].append(f"- [anchor {a.id}] {a.text}")
    return AnchorBlock(
        head="\n".join(texts[False]) if len(texts[False]) > 1 else "",
        riding="\n".join(texts[True]) if len(texts[True]) > 1 else "",
        head_ids=tuple(a.id for a in ordered if a.id not in riding),
        riding_ids=tuple(a.id for a in ordered if a.id in riding),
        tokens=needed,
    )
