"""Removal on a server that shifts the KV (profile ShiftFirst): old turns leave whole.

llama-server with ``--cache-reuse N`` resumes past a change: after the common prefix
it shifts every cached run of at least N tokens that matches the prompt at the current
position into place, and its reuse ends at the first prompt position no such run
matches (tools/server, ``update_slots``; bench/simserver.py models it). So a fold, a
replacement, ends the reuse where it is, while a removed span followed by N unchanged
tokens costs nothing.

Sakur4 keeps the user's requests (pinned). Removing the oldest answered turn's answer,
calls and results leaves its request beside the kept text before it: one removed span,
the rest shifted. Removing two turns at once leaves the second's request (~40 tokens)
between two removed spans, a run under N, and the reuse ends there. So the planner
removes a *unit* (a run of removable messages between two kept ones) from the oldest
on, and prices each plan by the runs the server can shift (:func:`price`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sakur4.engine.episode import Episode
from sakur4.engine.messages import Shape
from sakur4.vocabulary import Tier

# The shortest run the server shifts: llama-server's --cache-reuse as the README and the
# bench run it (256). The probe sees that kept text is shifted, not from what length; a
# server with a larger N shifts fewer runs than planned, and its receipts say so.
SHIFT_RUN = 256


@dataclass(frozen=True, slots=True)
class Unit:
    """Consecutive removable messages: ``members`` leave the prompt together.

    ``start``/``end``: its token span in the prompt as it is now; ``tokens``: what it
    gives back (its members' renderings and their template tokens).
    """

    start: int
    end: int
    members: tuple[int, ...]
    befores: tuple[int, ...]
    tokens: int


def units(
    episodes: Sequence[Episode],
    shape: Shape,
    shown: Sequence[Tier],
    group_start: Sequence[int],
    size: Callable[[int, Tier], int],
    keep: set[int],
    total: int,
    overhead: int,
) -> list[Unit]:
    """The removable units, oldest first.

    A message is removable when everything it shows may leave: not pinned (the user's
    requests, the harness's instructions), not protected (``keep``: the current turn),
    and a tool call only with all its results, a result only with its call.
    """
    visible = [g for g in range(len(shape.starts)) if any(shown[i].shown for i in shape.members(g))]
    movable = {
        g
        for g in visible
        if all(not (shown[i].shown and (i in keep or episodes[i].pinned)) for i in shape.members(g))
    }
    # Calls and results leave together: drop any message whose partner must stay.
    changed = True
    while changed:
        changed = False
        for g in sorted(movable):
            if not _pairs_leave(g, shape, shown, movable):
                movable.discard(g)
                changed = True
    found: list[Unit] = []
    run: list[int] = []
    for g in [*visible, -1]:
        if g in movable:
            run.append(g)
            continue
        if run:
            members = tuple(i for h in run for i in shape.members(h) if shown[i].shown)
            befores = tuple(size(i, shown[i]) for i in members)
            end = group_start[g] if g >= 0 else total
            tokens = sum(befores) + overhead * len(run)
            found.append(Unit(group_start[run[0]], end, members, befores, tokens))
            run = []
    return found


def _pairs_leave(g: int, shape: Shape, shown: Sequence[Tier], movable: set[int]) -> bool:
    for i in shape.members(g):
        if not shown[i].shown:
            continue
        partners = [*shape.results_of.get(i, ())]
        if shape.call_of[i] >= 0:
            partners.append(shape.call_of[i])
        for j in partners:
            if shown[j].shown and shape.group_of[j] not in movable:
                return False
    return True


def price(chosen: Sequence[Unit], first_change: int) -> int:
    """Tokens the server reuses when ``chosen`` (the oldest units, in order) leave:
    the common prefix, then each kept run of at least :data:`SHIFT_RUN` tokens shifted
    into place, up to the first shorter one or ``first_change`` (where the prompt
    differs from the cache anyway). Positions are the prompt's before the removal."""
    if not chosen:
        return first_change
    reused = min(chosen[0].start, first_change)
    if first_change <= chosen[0].start:
        return reused
    for k, u in enumerate(chosen):
        stop = chosen[k + 1].start if k + 1 < len(chosen) else first_change
        run = min(stop, first_change) - u.end
        if run < SHIFT_RUN:
            break
        reused += run
        if stop >= first_change:
            break
    return reused
