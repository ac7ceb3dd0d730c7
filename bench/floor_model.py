"""The floor's model: a scripted session as items that arrive call by call, and the
cheapest plan that keeps every call inside the window (bench/floor.py prints it).

**Items.** Every message the scripted agent (:mod:`sakur4.demo.agent`) sends after
the harness head, in prompt order: per turn the previous turn's answer and the
user's request (they arrive at the turn's first call), the re-read pair the agent
sends when that call's prompt lacks a needed result (a tool call and the full
result: one more call), and each tool call with its result (one call each). Each
item has its token count (measured spans of the real server's template and
tokenizer, or an estimate: bench/floor.py says which) and the needs its text holds
verbatim (the agent's check is a substring test over the prompt).

**Plans.** At each call, before it is sent, any item already present (not one
arriving with this call: the model sees each item at least once) may leave the
prompt for good. A stub, a summary or a placeholder in its place is not modelled:
its text holds no needed content (the agent's check is verbatim) and it costs its
own tokens plus the same cut, so removing the item instead is never dearer and
never longer (a plan with stubs costs at least the same plan with removals).

**Cost** on a server that resumes at any prefix (``--swa-full``): a call whose
prompt changed at the earliest removed item re-processes every item still present
after it; the items arriving with the call are processed by every strategy and the
baseline alike, so the *overhead* (the bench's: processed minus the no-management
baseline's) is the sum over calls of the old items re-processed, plus every
re-read call (the baseline never makes one). ``free_events``: removals cost
nothing (a relaxation: the re-reads alone).

**Promises** (Sakur4's): ``pin`` keeps the turn-1 request (it carries the pinned
correction) in every prompt; ``requests`` keeps every user request in full; ``live``
keeps the newest answered tool result with its call (the planner's quality dial,
``Policy.live_results`` = 1: the agent's working memory; without it a plan may take
a result away at the very next call, while the model still writes the turn's answer
from it). The window is not a promise here but the problem: without it nothing is
ever removed and the overhead is 0.

**The solver** is exact over this plan space: a dynamic programme over (call,
items present), with two pruning rules each proven safe in the docstrings of
:func:`_moves` and :func:`_prune`. The floor is clairvoyant: it knows which
results later turns will ask about.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import combinations

REQUEST = "request"
ANSWER = "answer"
CALL = "call"
RESULT = "result"
REREAD_CALL = "reread-call"
REREAD_RESULT = "reread-result"

PROMISES = ("pin", "requests")  # Sakur4's, kept at any pressure
KNOWN = (*PROMISES, "live")


@dataclass(frozen=True, slots=True)
class Item:
    """One message after the head; ``id`` is its place in the prompt (ascending)."""

    id: int
    kind: str
    turn: int
    tokens: int
    holds: frozenset[int] = frozenset()  # need turns whose needed text this item holds
    pin: bool = False  # the request that carries the pinned correction


@dataclass(frozen=True, slots=True)
class Slot:
    """One call: the items arriving with it, the need its prompt is checked for (the
    turn's first call), and whether it happens only when that need was unmet."""

    turn: int
    step: int  # 0: the turn's first call; -1: the re-read call; k + 1 after tool call k
    arrivals: tuple[int, ...]
    need: int | None = None
    reread: bool = False


@dataclass(frozen=True, slots=True)
class FloorScript:
    """A session as the floor sees it: the head (BOS and system message), the
    generation prompt every call ends with, the items and the calls."""

    name: str
    head: int
    gen: int
    items: tuple[Item, ...]
    slots: tuple[Slot, ...]

    def __post_init__(self) -> None:
        for i, it in enumerate(self.items):
            if it.id != i:
                raise ValueError(f"item {i} has id {it.id}: ids are prompt positions")

    def baseline(self) -> int:
        """What the script costs unmanaged on a window it fits: every token once
        (each call resumes where the last one ended; its generation prompt is the
        start of the next assistant message)."""
        return self.head + self.gen + sum(it.tokens for it in self.items if not _is_reread(it))

    def need_slot(self) -> dict[int, int]:
        """Need turn -> the index of the call whose prompt is checked for it."""
        return {s.need: i for i, s in enumerate(self.slots) if s.need is not None}


def without_foresight(script: FloorScript) -> FloorScript:
    """The script as a planner that cannot see later turns plans it: no item is known
    to answer a later need, so the plan never keeps one for that, and every need turn
    is charged its re-read. The plan's figure is an upper bound on what that plan
    costs (a needed item it happens to keep spares a re-read) and it is a plan a
    planner could make (its removals depend on sizes, not on what is asked later)."""
    items = tuple(
        Item(it.id, it.kind, it.turn, it.tokens, frozenset(), it.pin) for it in script.items
    )
    return FloorScript(script.name, script.head, script.gen, items, script.slots)


def _is_reread(it: Item) -> bool:
    return it.kind in (REREAD_CALL, REREAD_RESULT)


@dataclass(frozen=True, slots=True)
class Event:
    """A call whose prompt dropped items: where it cut, what left, what it cost."""

    slot: int
    turn: int
    step: int
    cut: int  # the earliest item removed
    removed: tuple[int, ...]
    reprocessed: int  # old items still present after the cut


@dataclass(frozen=True, slots=True)
class Plan:
    """The cheapest plan found: its overhead, made of re-processing and re-reads."""

    overhead: int
    reprocessed: int
    rereads: tuple[int, ...]  # need turns re-read
    reread_tokens: int
    events: tuple[Event, ...]
    states: int  # (call, present) states the programme kept at its widest
    exact: bool = True  # False: states were cut to the beam, the plan is one found


@dataclass(slots=True)
class _State:
    present: frozenset[int]
    pending: bool  # the need was unmet: the re-read call comes next
    cost: int
    back: _State | None = field(default=None, repr=False)
    event: Event | None = None
    reread: int | None = None  # need turn re-read at this step


class Infeasible(ValueError):
    """No plan keeps every call inside the window (the promises take too much)."""


def protected(it: Item, promises: Iterable[str]) -> bool:
    """Kept in every prompt after it arrives (the promises on requests)."""
    ps = set(promises)
    return it.kind == REQUEST and ("requests" in ps or (it.pin and "pin" in ps))


def _known(promises: Iterable[str]) -> None:
    bad = set(promises) - set(KNOWN)
    if bad:
        raise ValueError(f"unknown promise(s) {', '.join(sorted(bad))} (one of {KNOWN})")


def kept_at(script: FloorScript, promises: Iterable[str]) -> list[list[bool]]:
    """Per call, per item: whether a promise keeps it in that call's prompt.

    ``live``: the newest result that arrived before the call (the model has answered
    it: it wrote this call after reading it) and the call that asked for it, as the
    planner's ``protected`` keeps them. That result is present at every such call: it
    could not leave when it arrived, and from the next call on it is kept until a
    newer one arrives."""
    static = [protected(it, promises) for it in script.items]
    out: list[list[bool]] = []
    newest: tuple[int, ...] = ()
    for slot in script.slots:
        keep = list(static)
        if "live" in set(promises):
            for i in newest:
                keep[i] = True
        out.append(keep)
        kinds = [script.items[i].kind for i in slot.arrivals]
        for k, kind in enumerate(kinds):
            if kind in (RESULT, REREAD_RESULT):
                newest = slot.arrivals[max(0, k - 1) : k + 1]  # the call and its result
    return out


def solve(
    script: FloorScript,
    window: int,
    promises: Sequence[str] = PROMISES,
    *,
    free_events: bool = False,
    beam: int | None = None,
    bound: int | None = None,
) -> Plan:
    """The cheapest plan (see the module docstring): exact over the plan space, or,
    with ``beam`` and more states than it at some call, the cheapest plan among the
    ``beam`` cheapest states kept at each call (``Plan.exact`` False: a feasible
    plan, so an upper bound on the floor).

    ``bound``: the cost of a plan known to exist (e.g. one a beam found); states
    dearer than it are dropped, which loses no plan at or below it (costs only
    grow). Raises :class:`Infeasible` when no plan fits the window (or, with
    ``bound``, none at or below it)."""
    _known(promises)
    items = script.items
    checked_at = script.need_slot()
    # last_use[i]: the last call whose need check item i may answer (-1: none); until
    # then it is worth keeping, after it it is junk.
    last_use = [
        max((checked_at[n] for n in it.holds if n in checked_at), default=-1) for it in items
    ]
    keep_at = kept_at(script, promises)
    room = window - script.head - script.gen
    sizes = [it.tokens for it in items]
    states: list[_State] = [_State(frozenset(), False, 0)]
    widest = 1
    cut_short = False
    for si, slot in enumerate(script.slots):
        out: list[_State] = []
        for st in states:
            if slot.reread and not st.pending:
                out.append(st)  # the need was met: this call is never made
                continue
            if not slot.reread and st.pending:
                raise AssertionError("a pending re-read skipped")  # slots are ordered
            out.extend(_moves(script, st, si, slot, last_use, keep_at[si], room, free_events))
        if bound is not None:
            out = [s for s in out if s.cost <= bound]
        states = _prune(out, si + 1, last_use, sizes)
        widest = max(widest, len(states))
        if beam is not None and len(states) > beam:
            states.sort(key=lambda s: (s.cost, sum(sizes[i] for i in s.present)))
            states = states[:beam]
            cut_short = True
        if not states:
            raise Infeasible(
                f"no plan fits the {window:,}-token window at turn {slot.turn} "
                f"with promises {', '.join(promises) or 'none'}"
            )
    best = min(states, key=lambda s: s.cost)
    return _plan(best, script, widest, exact=not cut_short)


def _moves(
    script: FloorScript,
    st: _State,
    si: int,
    slot: Slot,
    last_use: Sequence[int],
    keep: Sequence[bool],
    room: int,
    free_events: bool,
) -> Iterator[_State]:
    """Every move worth making at call ``si`` from ``st``: no removal, or a cut at
    each removable present item with every removable item after it that answers no
    later need removed too, and any subset of the ones that do.

    Safe: removing, in the same call, an item after the cut that answers no later
    need leaves the cut where it is, lowers this call's cost by its size, and
    leaves every later call's prompt a subset of what it was (a later cut can only
    move later, a later cost only fall, the window only loosen); no need is lost.
    """
    items = script.items
    present = sorted(st.present)
    arriving = slot.arrivals
    sizes = [items[i].tokens for i in present]
    reread_cost = sum(items[i].tokens for i in arriving) if slot.reread else 0
    room_left = room - sum(items[i].tokens for i in arriving)
    total = sum(sizes)
    base = st.cost + reread_cost
    need = slot.need

    def finish(now: frozenset[int], event: Event | None, cost: int) -> _State:
        pending = need is not None and not any(need in items[i].holds for i in now)
        return _State(
            now,
            pending,
            base + (0 if free_events else cost),
            st,
            event,
            slot.turn if slot.reread else None,
        )

    new = frozenset(arriving)
    if total <= room_left:
        yield finish(st.present | new, None, 0)
    # Walking from the end: what stays after a cut at position k (protected or still
    # needed) and how much of it there is.
    stays_after = 0
    junk_after = 0
    useful_after: list[int] = []  # still-needed removable items after k, nearest first
    for k in range(len(present) - 1, -1, -1):
        i = present[k]
        if not keep[i]:
            head = frozenset(present[:k])
            before = sum(sizes[:k])
            for n in range(len(useful_after) + 1):
                for extra in combinations(useful_after, n):
                    out = sum(items[j].tokens for j in extra)
                    cost = stays_after - out
                    if before + cost > room_left:
                        continue
                    gone_after = set(extra)
                    tail = [j for j in present[k + 1 :] if (keep[j] or last_use[j] >= si)]
                    now = head | frozenset(j for j in tail if j not in gone_after) | new
                    removed = tuple(j for j in present[k:] if j not in now)
                    yield finish(now, Event(si, slot.turn, slot.step, i, removed, cost), cost)
        if keep[i]:
            stays_after += sizes[k]
        elif last_use[i] >= si:
            stays_after += sizes[k]
            useful_after.insert(0, i)
        else:
            junk_after += sizes[k]


def catch_up(a: frozenset[int], b: frozenset[int], sizes: Sequence[int]) -> int:
    """What state ``a`` pays at the next call to hold a subset of ``b``: removing its
    items that ``b`` lacks re-processes the items of both after the first of them."""
    extra = a - b
    if not extra:
        return 0
    first = min(extra)
    return sum(sizes[i] for i in a & b if i > first)


def _prune(
    states: list[_State], next_slot: int, last_use: Sequence[int], sizes: Sequence[int]
) -> list[_State]:
    """Drop every state B another state A dominates: the same pending re-read, the
    same items that may still answer a need (from ``next_slot`` on), and
    ``cost(A) + catch_up(A, B) <= cost(B)``.

    Safe: from A, at the next call remove what B lacks together with whatever B's
    best plan removes there, then follow that plan call for call. The items A lacks
    are skipped (a removal of one moves the cut later, so it costs no more); the
    merged cut costs at most the catch-up plus B's own cut (the items re-processed
    are A's and B's common ones after A's extra items, or B's after its cut); from
    then on A holds a subset of B, so every prompt fits where B's does, every later
    cost is no higher, and the same needs are met (the items that differ answer
    none). So A's best is no dearer than B's. With A a subset of B the catch-up is 0."""
    groups: dict[tuple[bool, frozenset[int]], list[_State]] = {}
    for s in states:
        useful = frozenset(i for i in s.present if last_use[i] >= next_slot)
        groups.setdefault((s.pending, useful), []).append(s)
    out: list[_State] = []
    for group in groups.values():
        group.sort(key=lambda s: (s.cost, len(s.present)))
        kept: list[_State] = []
        for s in group:
            if any(k.cost + catch_up(k.present, s.present, sizes) <= s.cost for k in kept):
                continue
            kept.append(s)
        out.extend(kept)
    return out


def _plan(best: _State, script: FloorScript, widest: int, *, exact: bool) -> Plan:
    events: list[Event] = []
    rereads: list[int] = []
    s: _State | None = best
    while s is not None:
        if s.event is not None:
            events.append(s.event)
        if s.reread is not None:
            rereads.append(s.reread)
        s = s.back
    events.reverse()
    rereads.reverse()
    reread_tokens = sum(
        it.tokens for it in script.items if _is_reread(it) and it.turn in set(rereads)
    )
    reprocessed = best.cost - reread_tokens
    return Plan(best.cost, reprocessed, tuple(rereads), reread_tokens, tuple(events), widest, exact)


@dataclass(slots=True)
class _Relaxed:
    useful: frozenset[int]
    pending: bool
    kept: int  # tokens of answers (items whose removal re-processes a request) kept
    cost: int
    last: tuple[int, ...] = ()  # what arrived with this state's last call


def lower_bound(
    script: FloorScript,
    window: int,
    promises: Sequence[str] = PROMISES,
    *,
    free_events: bool = False,
) -> int:
    """A floor no plan goes below, from a relaxation small enough for any size.

    Every event's cost splits into the requests (protected items) and the needed
    items (kept for a later need) it re-processes. Relaxed: an item that answers
    no later need (``junk``) leaves the prompt for free the call after it arrives,
    except that removing one which a protected item follows in the same call's
    arrivals (an answer, then the user's next request) is charged that item — an
    event that removes it re-processes that request, and distinct such items
    charge distinct requests — or it is kept for good. The needed items are
    tracked exactly (which are present, what removing some re-processes of the
    others after them, the re-reads). Each real plan maps onto a relaxed one that
    keeps a subset of its items at every call (so fits), removes the same needed
    items at the same calls (so re-reads the same) and costs no more. With
    ``free_events`` every removal is free: the re-reads alone. ``live`` is not
    modelled here: a plan that keeps the newest answered result is a plan, so the
    bound without that promise holds with it (it is only looser)."""
    _known(promises)
    items = script.items
    checked_at = script.need_slot()
    last_use = [
        max((checked_at[n] for n in it.holds if n in checked_at), default=-1) for it in items
    ]
    keep = [protected(it, promises) for it in items]
    sizes = [it.tokens for it in items]
    room = window - script.head - script.gen
    # What removing each item charges when it arrives with protected items after it.
    toll = [0] * len(items)
    for slot in script.slots:
        for a, i in enumerate(slot.arrivals):
            toll[i] = sum(sizes[j] for j in slot.arrivals[a + 1 :] if keep[j])
    states = [_Relaxed(frozenset(), False, 0, 0)]
    protected_in = 0  # tokens of protected items arrived before this call
    for si, slot in enumerate(script.slots):
        out: list[_Relaxed] = []
        for st in states:
            if slot.reread and not st.pending:
                out.append(st)
                continue
            # The last call's arrivals: needed ones join the tracked set; junk goes,
            # free or for its toll (or stays, counted in ``kept``).
            branches = [(st.useful, st.kept, st.cost)]
            for i in st.last:
                if keep[i]:
                    continue
                nxt = []
                for useful, kept, cost in branches:
                    if last_use[i] >= si:
                        nxt.append((useful | {i}, kept, cost))
                    elif toll[i] == 0:
                        nxt.append((useful, kept, cost))
                    else:
                        nxt.append((useful, kept + sizes[i], cost))
                        nxt.append((useful, kept, cost + (0 if free_events else toll[i])))
                branches = nxt
            for useful, kept, cost in branches:
                useful = frozenset(i for i in useful if last_use[i] >= si)  # expired: junk
                order = sorted(useful)
                for k in range(len(order) + 1):
                    for gone in combinations(order, k):
                        stay = useful - set(gone)
                        pay = 0
                        if gone and not free_events:
                            pay = sum(sizes[i] for i in stay if i > gone[0])
                        size = protected_in + kept + sum(sizes[i] for i in stay)
                        size += sum(sizes[i] for i in slot.arrivals)
                        if size > room:
                            continue
                        pending = False
                        if slot.need is not None:
                            here = stay | set(slot.arrivals)
                            pending = not any(slot.need in items[i].holds for i in here)
                        extra = sum(sizes[i] for i in slot.arrivals) if slot.reread else 0
                        out.append(
                            _Relaxed(
                                stay,
                                pending,
                                kept,
                                cost + pay + extra,
                                slot.arrivals,
                            )
                        )
        states = _pareto(out)
        if not states:
            raise Infeasible(
                f"no plan fits the {window:,}-token window at turn {slot.turn} "
                f"with promises {', '.join(promises) or 'none'} (even relaxed)"
            )
        protected_in += sum(sizes[i] for i in slot.arrivals if keep[i])
    return min(s.cost for s in states)


def _pareto(states: list[_Relaxed]) -> list[_Relaxed]:
    """Per (needed items present, pending re-read): the states no other beats on both
    tokens kept and cost (fewer kept tokens never hurt: the prompt only shrinks)."""
    groups: dict[tuple[frozenset[int], bool, tuple[int, ...]], list[_Relaxed]] = {}
    for s in states:
        groups.setdefault((s.useful, s.pending, s.last), []).append(s)
    out: list[_Relaxed] = []
    for group in groups.values():
        group.sort(key=lambda s: (s.kept, s.cost))
        best = None
        for s in group:
            if best is None or s.cost < best:
                out.append(s)
                best = s.cost
    return out
