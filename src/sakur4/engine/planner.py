"""The cut planner: which episodes step down this turn, and where the prompt may change.

Changing the prompt at token position p makes the server re-process everything
after the latest point it can resume from at or before p. So a plan is chosen
by its cut c (a resume point): it changes only messages that start at or after
c, it costs the tokens after c, and once that is paid, stepping down more after
c is almost free — the target is a floor, not a stopping point.

- Steps that change no bytes (a rendering no longer than its text stays the
  text) cost nothing at any position: taken, wherever they lie, by every plan
  that changes the prompt or is under pressure.
- Below the trigger: answered tool results fold while it is nearly free — the
  cached tokens the fold makes the server re-process, beyond what the turn
  changes anyway, are within ``Policy.tidy_budget``. That is the call right after
  a result was answered (what follows it is new anyway); the newest
  ``Policy.live_results`` answered results stay Live, and the results behind
  them wait for the trigger and fold together.
- Pressure ≥ trigger: the requested cut is the latest message start from which
  one-rung steps bring the prompt below the trigger; the chosen cut is a resume
  point at or before it, within the cut tolerance the one that re-processes the
  fewest cached tokens per token of room it buys below the trigger (the target
  is no longer where an event must reach: reaching it from the latest cut that
  could re-processed the history after the head at most events, docs/DESIGN.md
  "Room, not target"), and every episode after it steps one rung. Every answered
  result may fold then, the newest included; with ``live_results`` 0, the results
  the model is about to read count as given back (they fold on the next call for
  the price of their stubs): when that settles the prompt, the pressure call folds
  only the answered results, as a quiet call would.
- On a server that shifts the KV (profile ShiftFirst, :mod:`~sakur4.engine.removal`):
  nothing folds in place; above the drain line the oldest answered turn leaves whole
  while that is free, and at the trigger the oldest units leave whole where that
  re-processes less than the fold plan.
- Never a prompt larger than the window: when no plan gets below the trigger, every
  episode that can step does; if the prompt still does not fit, the plan is
  refused with the figures. A prompt that fits is never refused.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from types import MappingProxyType

from sakur4.engine.anchors import Anchor, AnchorBlock, render_anchor_block
from sakur4.engine.cache import Checkpoints, Layout
from sakur4.engine.candidates import (
    NEXT,
    Candidate,
    Scan,
    candidates,
    drops,
    protected,
    unread_attachments,
)
from sakur4.engine.episode import Episode
from sakur4.engine.folds import PREAMBLE, shown_text
from sakur4.engine.messages import (
    block_ids_of,
    group_key,
    head_key,
    riding_key,
    shape_of,
    visible_tiers,
)
from sakur4.engine.plan import Plan, Verdict
from sakur4.engine.policy import PlanSettings
from sakur4.engine.removal import Unit, price, units
from sakur4.engine.tiers import Held, Step, reclaimed
from sakur4.errors import AnchorBudgetError, InputError
from sakur4.vocabulary import Kind, Tier

# Template tokens per message (role markers), used only to size messages the
# server has not seen; messages in the cached layout are sized by their spans.
MESSAGE_OVERHEAD = 4
# Template tokens a tool call costs beyond its arguments (at least its name), for calls
# the server has not seen: without it an assistant message of n calls was sized n tokens
# short, and a plan that "fit" by less than that sent a prompt over the window.
CALL_OVERHEAD = 1
# On a server that shifts the KV, the most of the window a prompt may keep after the
# trigger when removing one old unit is free and removing two is not (ranked with the
# simulator: 0.85 against 0.90 and none, issue 40).
SHIFT_CEILING = 0.85

Count = Callable[[str], int]


def plan_turn(
    episodes: Sequence[Episode],
    settings: PlanSettings,
    *,
    anchors: Sequence[Anchor],
    layout: Layout | None,
    checkpoints: Checkpoints,
    count: Callable[[str], int],
    underestimate: int = 0,
) -> Plan:
    """Plan this turn so the prompt fits, changing it only after a point the server resumes from.

    ``settings`` is the session's window, profile and policy; ``layout`` is the
    prompt the server last received for this session (None if it holds nothing);
    ``count`` sizes stubs and unseen messages; ``underestimate`` is how many
    tokens a rendering of this turn measured beyond the plan's estimate (the
    gateway plans again with it rather than send a prompt the window cannot
    hold). Pure: the same inputs give the same plan.
    """
    if underestimate < 0:
        raise InputError("underestimate must not be negative")
    planner = _Planner(episodes, settings, count, layout, checkpoints, underestimate)
    # Anchors the cached head does not hold ride apart: pinning one must not by
    # itself re-process the head (SPEC §7 Anchors).
    cached = block_ids_of(layout.spans[0].key) if layout and layout.spans else None
    riding = [a.id for a in anchors if a.id not in cached] if cached is not None else []
    try:
        block = render_anchor_block(anchors, planner.anchor_budget, riding)
    except AnchorBudgetError as e:
        planner.measure((), "", "", sum(a.tokens for a in anchors))
        return planner.plan(Verdict.REFUSED, [], [], None, str(e))
    planner.block = block
    planner.measure(
        block.head_ids, block.head, block.riding, count(block.head) if block.head else 0
    )
    return planner.decide()


class _Planner:
    """One plan_turn call's working state; not shared, not kept."""

    def __init__(
        self,
        episodes: Sequence[Episode],
        settings: PlanSettings,
        count: Count,
        layout: Layout | None,
        checkpoints: Checkpoints,
        extra: int,
    ) -> None:
        self.episodes = episodes
        self.target = settings.target_tokens
        # The anchor block's share: the target less the preamble that introduces it.
        self.preamble = settings.preamble or PREAMBLE
        self.anchor_budget = self.target - count(self.preamble)
        self.block: AnchorBlock | None = None  # None: the anchors could not fit
        self.extra = extra  # tokens a rendering measured beyond the estimate
        self.shape = shape_of(episodes)
        self.count = count
        self.layout = layout
        self.checkpoints = checkpoints
        self.window = settings.window
        self.profile = settings.profile
        self.policy = settings.policy
        self.trigger = settings.trigger_tokens
        self.tiers = [e.tier for e in episodes]
        self.shown = visible_tiers(episodes, self.tiers, self.shape)
        self._sizes: dict[tuple[int, Tier], int] = {}
        self.exact: dict[int, int] = {}  # episode index -> its message's cached size
        self.rider_at: int | None = None
        self.head_end = 0
        self.shifted: int | None = None  # a removal plan's predicted reuse (ShiftFirst)

    def size(self, i: int, tier: Tier) -> int:
        """Tokens episode ``i`` renders to at ``tier``: exact where its message is cached."""
        if tier >= Tier.ARCHIVED:
            return 0
        if tier is self.tiers[i] and i in self.exact:
            return self.exact[i]
        e = self.episodes[i]
        call = CALL_OVERHEAD if e.kind is Kind.TOOL_CALL else 0
        if tier is Tier.LIVE:
            return e.tokens + call
        key = (i, tier)
        got = self._sizes.get(key)
        if got is None:
            got = self._sizes[key] = self.count(shown_text(e, tier)) + call
        return got

    def measure(
        self, block_ids: Sequence[int], block_head: str, block_riding: str, anchor_tokens: int
    ) -> None:
        """Lay out the prompt as it is now, against the cached layout.

        Sets ``total`` (prompt tokens with no steps), ``first_change`` (where it
        already differs from the cache: new messages, a new rider), ``base``
        (where the server would resume with no steps), each group's start, and
        the exact size of each single-episode message the cache holds.
        ``anchor_tokens`` sizes the block at the head if the server has not seen it.
        """
        eps, shape, shown = self.episodes, self.shape, self.shown
        keys = [head_key(shape.head, eps, shown, block_ids, block_head, self.preamble)]
        owners = [-1]
        bounds = [*shape.starts, len(eps)]
        for g in range(len(shape.starts)):
            a, b = bounds[g], bounds[g + 1]
            if b - a == 1 and not shown[a].shown:
                continue  # most of a long session: nothing shown, no message
            k = group_key(range(a, b), eps, shown)
            if k:
                keys.append(k)
                owners.append(g)
        spans = self.layout.spans if self.layout else ()
        if block_riding:
            at = self._rider_slot(riding_key(block_riding), owners)
            keys.insert(at, riding_key(block_riding))
            owners.insert(at, -2)
        m = 0
        while m < len(keys) and m < len(spans) and keys[m] == spans[m].key:
            m += 1
        self.group_start = [-1] * len(shape.starts)
        for j in range(m):
            g = owners[j]
            if g >= 0:
                self.group_start[g] = spans[j].start
                self._exact(g, spans[j].end - spans[j].start)
        pos = spans[m].start if m < len(spans) else (spans[-1].end if spans else 0)
        self.first_change = pos
        known = {s.key: s.end - s.start for s in spans[m:]}
        for j in range(m, len(keys)):
            g = owners[j]
            if g >= 0:
                self.group_start[g] = pos
            size = known.get(keys[j])
            if size is None:
                size = self._estimate(g, anchor_tokens, block_riding)
            elif g >= 0:
                self._exact(g, size)
            if g == -1:
                self.head_end = pos + size
            pos += size
        if m:
            self.head_end = spans[0].end
        self.total = pos
        cached_end = self.layout.end if self.layout else 0
        self.cached_end = cached_end
        self.base = self.checkpoints.latest_at_or_before(min(self.first_change, cached_end))

    def _exact(self, g: int, size: int) -> None:
        members = self.shape.members(g)
        if len(members) == 1:
            self.exact[members[0]] = max(size - MESSAGE_OVERHEAD, 0)

    def _rider_slot(self, key: str, owners: list[int]) -> int:
        """Where the riders go among this turn's messages: where the server last saw
        them (after the same episode), else at the end."""
        spans = self.layout.spans if self.layout else ()
        index = {e.id: i for i, e in enumerate(self.episodes)} if spans else {}
        for j in range(1, len(spans)):
            if spans[j].key != key:
                continue
            before = spans[j - 1].key
            if before.startswith("head|"):
                last = len(self.shape.head) - 1
            else:
                found = index.get(int(before.split(",")[-1].split(".")[0]))
                if found is None:
                    break
                last = found
            starts = self.shape.starts
            for at, g in enumerate(owners):
                if g >= 0 and starts[g] > last:
                    self.rider_at = starts[g]
                    return at
            break
        self.rider_at = None
        return len(owners)

    def _estimate(self, g: int, anchor_tokens: int, block_riding: str) -> int:
        if g == -2:
            return self.count(block_riding) + MESSAGE_OVERHEAD
        members = self.shape.head if g == -1 else self.shape.members(g)
        size = sum(self.size(i, self.shown[i]) for i in members) + MESSAGE_OVERHEAD
        if g == -1:
            size += self.count(self.preamble) + anchor_tokens
        return size

    # -- choosing ----------------------------------------------------------

    def _candidates(self, keep: set[int]) -> Iterator[Candidate]:
        return candidates(
            self.episodes,
            self.shape,
            self.tiers,
            self.shown,
            self.group_start,
            self.size,
            keep,
        )

    def resume_points(self, upper: int, scan: Scan) -> Iterator[int]:
        """Where the server can resume, at or before ``upper``, latest first; 0 last."""
        last = -1
        for p in self._points(upper, scan):
            if p != last:
                yield p
                last = p

    def _points(self, upper: int, scan: Scan) -> Iterator[int]:
        if self.layout is not None:
            if self.checkpoints.every_boundary:
                yield upper
                k = 0
                while k < len(scan.items) or scan.pull():
                    p = scan.items[k].pos
                    k += 1
                    if p <= upper:
                        yield p
            else:
                ps = self.checkpoints.positions
                for k in range(bisect_right(ps, min(upper, self.cached_end)) - 1, -1, -1):
                    yield ps[k]
        yield 0

    def decide(self) -> Plan:
        pol = self.policy
        soft = protected(self.episodes, self.shape, pol.live_results)
        drop_steps, held = drops(self.episodes, self.shape, self.tiers, soft)
        free = [c for c in self._candidates(soft) if not c.changes]
        total = self.total + self.extra
        pressured = total >= self.trigger
        note = ""
        requested: int | None = None
        taken: list[Candidate] = []
        if pressured:
            # Every answered result may fold now, the newest included: kept Live, a
            # result after the cut is re-processed by every event (at 16k tokens
            # that tripled the events' cost, docs/design/eviction.md).
            keep = protected(self.episodes, self.shape, 0)
            due = self._due(keep) if pol.live_results == 0 else 0
            taken, requested, note = self._relieve(keep, due)
            if due and total - _gain(taken) > self.trigger:
                taken, requested, note = self._relieve(keep, 0)
            loose = unread_attachments(self.episodes, keep)
            if loose and total - _gain(taken) > self.window:
                # Only a turn that cannot fit otherwise: the model reads an attachment
                # it was given better than a fold of it (it opens one with open_fold).
                keep = keep - loose
                taken, requested, note = self._relieve(keep, 0)
                folded = sum(1 for c in taken for i in c.members if i in loose)
                if folded:
                    said = f"{folded} unread attachment(s) folded: the turn cannot fit with them"
                    note = f"{note}; {said}" if note else said
            if self.profile.drain is not None and self.layout is not None:
                taken, requested, note = self._removal_or(keep, taken, requested, note, due)
            free = [c for c in self._candidates(keep) if not c.changes]
        elif self.profile.drain is None:
            taken, requested, note = self._tidy(soft)
        elif total > self.window * self.profile.drain:
            # A shifting server: nothing folds in place (a stub ends the server's reuse
            # where it lies, and its episode leaves whole later anyway); above the drain
            # line the oldest unit leaves while that is free, so the trigger rarely
            # needs two units at once (the second's request ends the shifting).
            taken, requested, note = self._drain(soft)
        new_total = total - _gain(taken)
        # With the estimates short by ``extra`` (the gateway measured a rendering over
        # the window), the steps' gain is an estimate too: the gateway measures the
        # prompt they leave, and refuses on that figure if it does not fit. Refused here,
        # a turn whose folded attachments measured under the window was refused on the
        # estimate (issue 41: code tokenizes denser than characters/4).
        estimated_only = self.extra > 0 and bool(taken)
        if new_total > self.window and not estimated_only:
            why = (
                f"the prompt needs {new_total:,} tokens after every step it can take this "
                f"turn; the window holds {self.window:,}"
            )
            refused = new_total - self.extra
            return self.plan(Verdict.REFUSED, [], held, requested, why, new_total=refused)
        if not taken and not pressured:
            free = []  # due with the next event: a quiet turn's receipt stays empty
        chosen = {i for c in taken for i in c.members}
        steps = [
            Step(
                self.episodes[i].id,
                self.tiers[i],
                NEXT[self.tiers[i]] if c.to is None else c.to,
                *self._told(i, b, a, c),
            )
            for c in [*taken, *(c for c in free if c.members[0] not in chosen)]
            for i, b, a in zip(c.members, c.befores, c.afters, strict=True)
        ]
        steps.sort(key=lambda s: s.episode_id)
        if not pressured:
            verdict = Verdict.FITS
        elif new_total <= self.target:
            verdict = Verdict.RECLAIMED
        else:
            verdict = Verdict.STEPPING
            if not taken:
                note = note or "nothing outside the protected tail can step; the prompt fits"
            elif new_total > self.window:
                short = f"the estimates fell short by {self.extra:,}: measured after these steps"
                note = f"{note}; {short}" if note else short
        first = min([self.first_change, *(c.pos for c in taken)])
        return self.plan(
            verdict,
            steps + drop_steps,
            held,
            requested,
            note,
            first=first,
            new_total=new_total - self.extra,
            changed=bool(taken),
        )

    def _units(self, keep: set[int]) -> list[Unit]:
        """The removable units of this prompt, oldest first (:func:`removal.units`)."""
        return units(
            self.episodes,
            self.shape,
            self.shown,
            self.group_start,
            self.size,
            keep,
            self.total,
            MESSAGE_OVERHEAD,
        )

    def _drain(self, keep: set[int]) -> tuple[list[Candidate], int | None, str]:
        """Below the trigger but above the drain line, on a shifting server: the oldest
        unit leaves while that is free (the server shifts what follows)."""
        if self.layout is None:
            return [], None, ""
        found = self._units(keep)
        if not found:
            return [], None, ""
        u = found[0]
        reused = price([u], self.first_change)
        cost = self.first_change - (u.tokens if u.end <= self.first_change else 0) - reused
        if cost > self.policy.tidy_budget:
            return [], None, ""
        self.shifted = reused
        return (
            self._removing([u]),
            u.start,
            f"old unit removed whole ({u.tokens:,} tokens): the server shifts what follows",
        )

    def _removing(self, chosen: list[Unit]) -> list[Candidate]:
        archived = Tier.ARCHIVED
        return [
            Candidate(
                u.start,
                tuple(i for i in u.members if self.tiers[i] < archived),
                tuple(
                    b for i, b in zip(u.members, u.befores, strict=True) if self.tiers[i] < archived
                ),
                tuple(0 for i in u.members if self.tiers[i] < archived),
                True,
                to=archived,
            )
            for u in chosen
        ]

    def _removal_or(
        self,
        keep: set[int],
        folds: list[Candidate],
        requested: int | None,
        note: str,
        due: int = 0,
    ) -> tuple[list[Candidate], int | None, str]:
        """On a server that shifts the KV: the cheapest of three plans by the tokens the
        server re-processes (the prompt left less what it reuses).

        - the fold plan (``folds``): the reuse ends at its cut;
        - the oldest units removed whole, as few as bring the prompt below the trigger,
          priced by the runs the server shifts (:func:`removal.price`): two or more end
          the shifting at the second's request;
        - the oldest unit alone, when the prompt it leaves is within
          :data:`SHIFT_CEILING` of the window (above the trigger: the next call goes on);
        - the oldest unit removed whole *and* the fold plan for what it leaves: the text
          between the unit and the fold's cut is shifted into place, so the unit's room
          is free and the folds cost what they cost alone.
        """
        total = self.total + self.extra
        found = self._units(keep)
        first = min([self.first_change, *(c.pos for c in folds)])
        fold_reused = self.checkpoints.latest_at_or_before(min(first, self.cached_end))
        best: tuple[int, list[Candidate], int | None, str, int | None]
        best = (total - _gain(folds) - fold_reused, folds, requested, note, None)
        chosen: list[Unit] = []
        gain = 0
        for u in found:
            chosen.append(u)
            gain += u.tokens
            if total - gain < self.trigger:
                break
        if chosen and total - gain <= self.window:
            reused = price(chosen, self.first_change)
            if total - gain - reused <= best[0]:
                why = (
                    f"{len(chosen)} old unit(s) removed whole ({gain:,} tokens): the server "
                    f"shifts what follows, {reused:,} predicted reused"
                )
                best = (total - gain - reused, self._removing(chosen), chosen[0].start, why, reused)
        if len(chosen) > 1 and total - chosen[0].tokens <= self.window * SHIFT_CEILING:
            # The oldest unit alone, the prompt left above the trigger: the next call
            # removes the next unit as freely (S16 simulated: 34,248 -> 33,511).
            u = chosen[0]
            reused = price([u], self.first_change)
            if total - u.tokens - reused <= best[0]:
                why = f"the oldest unit removed whole ({u.tokens:,} tokens), the next follows"
                best = (total - u.tokens - reused, self._removing([u]), u.start, why, reused)
        if len(chosen) > 1:
            u = chosen[0]
            self.extra -= u.tokens  # the folds plan for the prompt the unit leaves
            try:
                more, asked, said = self._relieve(keep | set(u.members), due)
            finally:
                self.extra += u.tokens
            if more:
                first = min([self.first_change, *(c.pos for c in more)])
                reused = price([u], first)
                left = total - u.tokens - _gain(more)
                if left <= self.window and left - reused < best[0]:
                    why = (
                        f"the oldest unit removed whole ({u.tokens:,} tokens, shifted) and "
                        f"{said or 'folds after the cut'}"
                    )
                    best = (left - reused, [*self._removing([u]), *more], asked, why, reused)
        _, taken, requested, note, self.shifted = best
        return taken, requested, note

    def _told(self, i: int, before: int, after: int, c: Candidate) -> tuple[int, int]:
        """A step's sizes as the plan reports them: from Live, the episode's own size as
        the gateway gave it (``Episode.tokens``: the store's figure), where the cut was
        measured on the cached message's span (its template tokens with it). A step that
        changes no bytes reports no change. (Issue 41: a receipt's step and the stored
        episode gave two figures for one episode.)"""
        if self.tiers[i] is not Tier.LIVE:
            return before, after
        own = self.episodes[i].tokens
        return own, (after if c.changes else own)

    def _due(self, keep: set[int]) -> int:
        """Tokens the results the model is reading now give back when they fold on the
        next call — the cheap moment, what follows them is new anyway."""
        due = 0
        for i in keep:
            e = self.episodes[i]
            if e.kind is Kind.TOOL_RESULT and self.tiers[i] is Tier.LIVE and not e.pinned:
                due += max(self.size(i, Tier.LIVE) - self.size(i, Tier.MASKED), 0)
        return due

    def _relieve(self, keep: set[int], due: int = 0) -> tuple[list[Candidate], int | None, str]:
        """Pressure: the cut that re-processes the fewest cached tokens per token of
        room it buys below the trigger.

        A plan's cost is the cached tokens after its cut that stay (what the server
        re-processes beyond this turn's new tokens); its worth, the room it leaves
        below the trigger before the next event. Tokens arrive at the session's pace
        whatever the plan, so the cheapest per token of room is the cheapest over the
        session. (Reclaiming down to target from the latest cut that could, as SPEC
        §7 first said, re-processed the history after the head at most events: S8 on
        a server that resumes any prefix, 16,662 tokens of overhead against 12,147,
        docs/DESIGN.md "Room, not target".)

        ``due``: what the unanswered results will give back on the next call; with
        results folding as soon as they are answered, reaching target now by a deep
        cut only to have the prompt settle far below it next call re-processed the
        whole tail at every event (S8: 10 events cut at the head's end).
        """
        scan = Scan(c for c in self._candidates(keep) if c.changes)
        total = self.total + self.extra
        need = total - self.target - due
        if need <= 0:
            taken, cut, _ = self._tidy(keep)
            return taken, cut, f"the unanswered results give back {due:,} tokens on the next call"
        if self.layout is None:
            return self._oldest_first(scan, need)
        # The requested cut: the latest message start from which one-rung steps get
        # the prompt below the trigger (or, when none can, the oldest candidate: every
        # episode that can step does, the window is what matters then).
        requested: int | None = None
        while (c := scan.pull()) is not None:
            left = total - scan.gained
            if left - due < self.trigger and left <= self.window:
                requested = c.pos
                break
        if not scan.items:
            return [], None, ""
        reachable = requested is not None
        if requested is None:
            requested = scan.items[-1].pos
        upper = min(requested, self.first_change)
        points = self.resume_points(upper, scan)
        cut = next(points)
        if reachable:
            # Within the tolerance before it, the resume point cheapest per token of
            # room: going back a little further can pick up a bulky result for little
            # extra re-processing.
            best: tuple[float, int] | None = None
            p: int | None = cut
            while p is not None and upper - p <= self.policy.cut_tolerance:
                scan.until(p)
                g = scan.gain(p)  # at least the requested cut's: below the trigger
                score = max(self.first_change - p - g, 0) / (self.trigger - (total - g - due))
                if best is None or score < best[0]:
                    best = (score, p)
                p = next(points, None)
            if best is not None:
                cut = best[1]
        note = ""
        tolerance = self.policy.cut_tolerance
        if upper - cut > tolerance:
            note = (
                f"nearest resume point {cut} lies {upper - cut} tokens before the requested "
                f"cut, beyond the tolerance of {tolerance}"
            )
        ring = bool(self.checkpoints.positions)
        if cut == 0 and ring and upper >= self.head_end > 0:
            # Visible: on a checkpoint ring, a long session loses the head's checkpoint.
            lost = f"no resume point at the head's end ({self.head_end}): re-processing from 0"
            note = f"{note}; {lost}" if note else lost
        scan.until(cut)
        return scan.after(cut), requested, note

    def _oldest_first(self, scan: Scan, need: int) -> tuple[list[Candidate], int | None, str]:
        """Pressure with nothing cached (a new session, or after a failed turn): every
        plan re-processes the whole prompt, so no cut is cheaper than another. Step
        the oldest tool results first, then the oldest messages, only down to target:
        the newest material stays. (Stepping everything after the cut at 0, as a
        cached session may, left an 11k-token first call at 474 tokens, issue 31.)"""
        while scan.pull() is not None:
            pass
        order = sorted(scan.items, key=lambda c: (not c.tool, c.pos))
        taken: list[Candidate] = []
        gained = 0
        for c in order:
            if gained >= need:
                break
            if c.delta > 0:
                taken.append(c)
                gained += c.delta
        if not taken:
            return [], None, ""
        note = "nothing cached: the oldest material steps first, down to target"
        return taken, min(c.pos for c in taken), note

    def _tidy(self, keep: set[int]) -> tuple[list[Candidate], int | None, str]:
        """Below the trigger: fold answered Live tool results while it is nearly free.

        Only the first rung: a stub still says what was there and how to open it;
        the rungs below it are for pressure (taken here, a result went from Live to
        Archived in three calls, out of sight of the agent that had just read it).

        A cut at p re-processes, beyond what this turn pays anyway, the cached
        tokens from p to where the prompt already changes, less what it
        reclaims: ``base - p - gain``. It is taken when that is within the tidy
        budget; among such cuts, the one with the largest gain net of it. The
        unreclaimed part only grows as p moves back, so the scan stops at the
        first p past the budget.
        """
        if self.layout is None:
            # What the server holds is unknown (a gateway started afresh on a server that
            # may hold the conversation): every fold would look free, and was not. The
            # same third request re-processed 2,654 tokens through a fresh gateway against
            # 1,318 through a warm one (bench/fresh_gateway.py, issue 41).
            return [], None, ""
        live = Tier.LIVE
        scan = Scan(
            c
            for c in self._candidates(keep)
            if c.tool and c.changes and c.delta > 0 and self.tiers[c.members[0]] is live
        )
        base = self.base
        best: tuple[int, int] | None = None
        for p in self.resume_points(base, scan):
            scan.until(p)
            g = scan.gain(p)
            extra = base - p - g
            if extra > self.policy.tidy_budget:
                break
            if g > 0 and (best is None or g - extra > best[0]):
                best = (g - extra, p)
        if best is None:
            return [], None, ""
        cut = best[1]
        return scan.after(cut), cut, ""

    def plan(
        self,
        verdict: Verdict,
        steps: list[Step],
        held: list[Held],
        requested: int | None,
        note: str,
        *,
        first: int | None = None,
        new_total: int | None = None,
        changed: bool = False,
    ) -> Plan:
        new_tokens = self.total if new_total is None else new_total
        refused = verdict is Verdict.REFUSED
        if refused:
            steps = []
        if refused or self.layout is None:
            reused = 0
        elif self.shifted is not None and changed:
            reused = self.shifted
        else:
            at = self.first_change if first is None else first
            reused = self.checkpoints.latest_at_or_before(min(at, self.cached_end))
        # The head is re-processed anyway: anchors riding apart join the block now.
        # (Otherwise a rider stays where it was first sent, cached like any message.)
        block = self.block
        joined = block.riding_ids if block and reused == 0 and not refused else ()
        in_block = tuple(sorted([*block.head_ids, *joined])) if block else ()
        if joined:
            # Visible: a re-prefill from the head must say why (receipts show the reason).
            ids = ", ".join(str(a) for a in joined)
            joining = f"riding anchor {ids} joins the head block"
            note = f"{note}; {joining}" if note else joining
        return Plan(
            verdict=verdict,
            profile=self.profile,
            window=self.window,
            prompt_tokens=self.total,
            new_tokens=new_tokens,
            target_tokens=self.target,
            steps=tuple(steps),
            held=tuple(held),
            requested_cut=requested,
            chosen_cut=reused if changed else None,
            reused=reused,
            reprefill=max(new_tokens - reused, 0),
            block_anchors=in_block,
            joined_anchors=joined,
            anchor_budget=self.anchor_budget,
            reason=self._reason(verdict, steps, note, requested, reused, changed),
            rider_at=None if joined else self.rider_at,
            preamble=self.preamble,
            moves=MappingProxyType({s.episode_id: s.to_tier for s in steps}),
        )

    def _reason(
        self,
        verdict: Verdict,
        steps: list[Step],
        note: str,
        requested: int | None,
        reused: int,
        changed: bool,
    ) -> str:
        p = self.profile
        pressure = (self.total + self.extra) / self.window
        rel = "≥" if pressure >= p.trigger else "<"
        head = f"pressure {pressure:.2f} {rel} trigger {p.trigger:.2f} ({p.name})"
        if verdict is Verdict.REFUSED:
            return f"{head}: refused: {note}" if note else f"{head}: refused"
        if not steps:
            return f"{head}; {note}" if note else head
        back = sum(s.reclaimed for s in steps)
        grew = sum(reclaimed(s.tokens_after, s.tokens_before) for s in steps)
        text = f"{head}: {len(steps)} steps reclaimed {back} tokens"
        if grew:
            text += f" (estimates grew {grew})"
        if changed:
            text += f"; cut at {reused} (requested {requested})"
        return f"{text}; {note}" if note else text


def _gain(taken: Sequence[Candidate]) -> int:
    return sum(c.delta for c in taken)
