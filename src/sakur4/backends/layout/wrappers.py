"""The chat template's wrappers: what the server's template renders around each kind of
message, learned from its own renders, so message ends come from one render and a
conversation that only grew is built without one.

Message ``i`` ends where the prefix ``messages[:i+1]`` rendered alone (no generation
prompt) ends, when that is a prefix of the whole. Rendering every prefix costs one call
a message and grows with the conversation, so the ends come from the one render where a
proof allows: each message's text in the render is its *wrapper* (the template's bytes
before and after the content, learned from a prefix render of an earlier message of the
same kind) around its content, byte for byte. A message whose bytes are not exactly
wrapper + content (a template that renders this message differently, tool calls, a kind
not seen yet) is measured with prefix renders, and its wrapper learned. (A template that
renders a message differently once more follow it, e.g. one that folds the system
prompt into the first user turn, gives no boundary there: that message's end is None.)

The same pieces build the prompt of a request that only appended messages, without
asking the server: trusted once renders confirmed such builds byte for byte
(:data:`CONFIRMATIONS`) and none disagreed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sakur4.backends.layout.spans import TokenLayout, role
from sakur4.backends.llamacpp import LlamaCppClient
from sakur4.errors import BackendRefused

# Renders that must agree byte for byte with a prompt built from learned pieces before
# a template context's prompts are built without rendering.
CONFIRMATIONS = 2

# A prompt built without a render: its bytes, the cached layout it extends, how many
# messages that shares, and each message's byte end.
Built = tuple[bytes, TokenLayout, int, list[int | None]]


@dataclass(frozen=True, slots=True)
class Wrapper:
    """What a template renders around the contents of a run of messages (usually one;
    see the module docstring): their bytes are ``parts[0] + content_1 + parts[1] + ...
    + content_m + parts[m]``."""

    parts: tuple[bytes, ...]

    def end_after(self, messages: Sequence[Any], full_b: bytes, start: int) -> int | None:
        """Where ``messages``, starting at ``start``, end if their bytes there are exactly
        this wrapper around their contents (as sent, or trimmed as some templates do)."""
        if len(messages) != len(self.parts) - 1 or not full_b.startswith(self.parts[0], start):
            return None
        return self._rest(messages, full_b, start + len(self.parts[0]), 0)

    def _rest(self, messages: Sequence[Any], full_b: bytes, pos: int, k: int) -> int | None:
        if k == len(messages):
            return pos
        after = self.parts[k + 1]
        for content in contents(messages[k]):
            if full_b.startswith(content + after, pos):
                end = self._rest(messages, full_b, pos + len(content) + len(after), k + 1)
                if end is not None:
                    return end
        return None

    def start_before(self, messages: Sequence[Any], full_b: bytes, end: int) -> int | None:
        """Where ``messages``, ending at ``end``, start, by the same proof."""
        for content in contents(messages[0]) if len(messages) == 1 else []:
            piece = self.parts[0] + content + self.parts[1]
            if end >= len(piece) and full_b.endswith(piece, 0, end):
                return end - len(piece)
        return None


def contents(message: Any) -> list[bytes]:
    """The ways a template may render a message's content: as sent, or trimmed."""
    content = message.get("content") if isinstance(message, Mapping) else None
    if content is None:
        return [b""]
    if not isinstance(content, str):
        return []  # content parts: the template joins them its own way
    out = [content.encode("utf-8")]
    trimmed = content.strip().encode("utf-8")
    return out if trimmed == out[0] else [*out, trimmed]


def learn(messages: Sequence[Any], piece: bytes) -> Wrapper | None:
    """The wrapper of measured messages: their bytes around the one place each content
    is, in order (None when a content is empty or not found exactly once)."""
    parts: list[bytes] = []
    pos = 0
    for m in messages:
        for content in contents(m):
            if content and piece.count(content, pos) == 1:
                at = piece.index(content, pos)
                parts.append(piece[pos:at])
                pos = at + len(content)
                break
        else:
            return None
    parts.append(piece[pos:])
    return Wrapper(tuple(parts))


Kind = tuple[bool, str, bool]


def kind(messages: Sequence[Any], i: int) -> Kind:
    """Messages of one kind share a wrapper: the first (it carries the template's
    preamble), and then by role and whether it carries tool calls."""
    m = messages[i]
    calls = bool(m.get("tool_calls")) if isinstance(m, Mapping) else False
    return i == 0, role(m), calls


class TemplateWrappers:
    """What one server's template renders, per template context (a request without its
    messages, canonical): each kind's wrapper, the generation prompt, whether each kind's
    content renders trimmed, and how far built prompts are trusted.

    ``one_render=False`` finds every message end with prefix renders (the reference the
    one-render ends are tested against)."""

    def __init__(self, client: LlamaCppClient, *, one_render: bool = True) -> None:
        self.client = client
        self.one_render = one_render
        # A run of several messages has a wrapper where the renders could not split it.
        self._wrappers: dict[str, dict[tuple[Kind, ...], Wrapper]] = {}
        # The bytes after the last message (the generation prompt), whether each kind's
        # content renders trimmed, and how many renders confirmed a built prompt byte for
        # byte (None: one did not).
        self._tails: dict[str, bytes] = {}
        self._trims: dict[str, dict[Kind, bool]] = {}
        self._confirmed: dict[str, int | None] = {}

    def trusted(self, context: str) -> bool:
        """Whether a prompt built in ``context`` may stand without a render."""
        return (self._confirmed.get(context) or 0) >= CONFIRMATIONS

    def distrust(self, context: str) -> None:
        """The server counted another prompt than one built in ``context``: render it
        from now on."""
        self._confirmed[context] = None

    def can_build(self, context: str, messages: Sequence[Any]) -> bool:
        """Whether ``context`` has learned enough to try building a prompt ending in
        the last of ``messages`` (checked before a cached layout is looked up)."""
        return (
            context in self._tails
            and bool(self._wrappers.get(context))
            and role(messages[-1]) != "assistant"
        )

    def build(
        self, messages: Sequence[Any], context: str, base: TokenLayout | None, k: int
    ) -> Built | None:
        """The prompt of a conversation that only grew, without asking the server: the
        cached prompt ``base`` up to its last unchanged message ``k - 1``, then each new
        message as its kind's wrapper around its content, then the generation prompt.

        Only where every piece was learned from this context's renders; the result is
        trusted once renders have confirmed builds byte for byte (:meth:`trusted`), and
        the server's own count of every prompt sent is checked against it afterwards
        (:meth:`distrust`)."""
        tail = self._tails.get(context)
        wrappers = self._wrappers.get(context)
        if tail is None or not wrappers or base is None or role(messages[k - 1]) == "assistant":
            return None  # an assistant message's end was measured with another follower
        end = base.message_byte_ends[k - 1]
        if end is None or not base.spans[k - 1].clean_end:
            return None
        trims = self._trims.get(context, {})
        pieces = [base.prompt.encode("utf-8")[:end]]
        ends: list[int | None] = list(base.message_byte_ends[:k])
        pos = end
        n, i = len(messages), k
        while i < n:
            # One message, or a run the renders could not split (as in message_ends).
            j = i
            w = wrappers.get((kind(messages, i),))
            if w is None:
                while j < n - 1 and role(messages[j]) == "assistant":
                    j += 1
                w = wrappers.get(tuple(kind(messages, x) for x in range(i, j + 1)))
                if w is None or j == i:
                    return None
            piece = [w.parts[0]]
            for x in range(i, j + 1):
                variants = contents(messages[x])
                if not variants:
                    return None
                if len(variants) > 1:
                    trimmed = trims.get(kind(messages, x))
                    if trimmed is None:
                        return None
                    variants = variants[1:] if trimmed else variants[:1]
                piece += [variants[0], w.parts[x - i + 1]]
            pieces += piece
            pos += sum(len(b) for b in piece)
            ends += [None] * (j - i) + [pos]
            i = j + 1
        pieces.append(tail)
        return b"".join(pieces), base, k, ends

    def learn_render(
        self,
        context: str,
        messages: Sequence[Any],
        ends: Sequence[int | None],
        full_b: bytes,
        built: Built | None,
    ) -> None:
        """After a render ``full_b`` with message ends ``ends``: learn the generation
        prompt and how each kind's content is rendered, and hold the prompt built for
        this request (if there was one) against the render."""
        last = ends[-1]
        if last is not None and role(messages[-1]) != "assistant":
            tail = full_b[last:]
            if self._tails.setdefault(context, tail) != tail:
                self._confirmed[context] = None  # the generation prompt varies
        wrappers = self._wrappers.get(context, {})
        trims = self._trims.setdefault(context, {})
        for i, end in enumerate(ends):
            start = ends[i - 1] if i > 0 else 0
            k = kind(messages, i)
            w = wrappers.get((k,))
            if end is None or start is None or w is None or k in trims:
                continue  # checked before the contents are encoded: most messages stop here
            variants = contents(messages[i])
            if len(variants) < 2:
                continue
            piece = full_b[start:end]
            for trimmed, content in zip((False, True), variants, strict=True):
                if piece == w.parts[0] + content + w.parts[1]:
                    trims[k] = trimmed
                    break
        if built is None or self._confirmed.get(context, 0) is None:
            return
        if built[0] == full_b and built[3] == list(ends):
            self._confirmed[context] = (self._confirmed.get(context) or 0) + 1
        else:
            self._confirmed[context] = None

    # -- message ends in a render ----------------------------------------------------

    async def message_ends(
        self, request: Mapping[str, Any], context: str, known: list[int | None], full_b: bytes
    ) -> tuple[list[int | None], int]:
        """Byte offset where each message ends in the full prompt ``full_b`` (None:
        unknown), and the number of renders it took. ``known`` holds the ends of a cached
        prefix; ``context`` is ``request`` without its messages, canonical.

        Each message after ``known`` is first held against its kind's wrapper at the
        end of the one before; the messages that fail that proof are measured with
        prefix renders (:meth:`_rendered_ends`), and their wrappers learned.
        """
        messages = list(request["messages"])
        if not self.one_render:
            return await self._rendered_ends(request, messages, list(known), full_b, len(known))
        wrappers = self._wrappers.setdefault(context, {})
        n = len(messages)
        ends: list[int | None] = list(known)
        renders = 0
        while len(ends) < n:
            i = len(ends)
            start = ends[i - 1] if i > 0 else 0
            # The run up to the next message a prefix can end with (llama.cpp renders a
            # trailing assistant message as a prefill, so it cannot end one).
            j = i
            while j < n - 1 and role(messages[j]) == "assistant":
                j += 1
            kinds = tuple(kind(messages, x) for x in range(i, j + 1))
            if start is not None:
                w = wrappers.get(kinds[:1])
                end = w.end_after(messages[i : i + 1], full_b, start) if w else None
                if end is not None:
                    ends.append(end)
                    continue
                # A run the renders could not split (the template refuses a prefix that
                # would end inside it) is matched whole, its inside left unknown as then.
                w = wrappers.get(kinds) if j > i else None
                end = w.end_after(messages[i : j + 1], full_b, start) if w else None
                if end is not None:
                    ends += [None] * (j - i) + [end]
                    continue
            run, more = await self._rendered_ends(request, messages[: j + 1], list(ends), full_b, i)
            renders += more
            self._fill_and_learn(messages, run, i, full_b, wrappers)
            ends = run
        return ends, renders

    def _fill_and_learn(
        self,
        messages: Sequence[Any],
        run: list[int | None],
        i: int,
        full_b: bytes,
        wrappers: dict[tuple[Kind, ...], Wrapper],
    ) -> None:
        """Complete a measured run ``i..len(run)-1`` from known wrappers (backwards from
        a known end, forwards from a known start) and learn the wrappers it shows."""
        j = len(run) - 1
        for x in range(j - 1, i - 1, -1):
            after, w = run[x + 1], wrappers.get((kind(messages, x + 1),))
            if run[x] is None and after is not None and w is not None:
                run[x] = w.start_before(messages[x + 1 : x + 2], full_b, after)
        for x in range(i, j + 1):
            begin, w = (run[x - 1] if x > 0 else 0), wrappers.get((kind(messages, x),))
            if run[x] is None and begin is not None and w is not None:
                run[x] = w.end_after(messages[x : x + 1], full_b, begin)
            end = run[x]
            if end is not None and begin is not None:
                learned = learn(messages[x : x + 1], full_b[begin:end])
                if learned is not None:
                    wrappers[(kind(messages, x),)] = learned
        begin = run[i - 1] if i > 0 else 0
        end = run[j]
        if j > i and begin is not None and end is not None and None in run[i:j]:
            learned = learn(messages[i : j + 1], full_b[begin:end])
            if learned is not None:
                wrappers[tuple(kind(messages, x) for x in range(i, j + 1))] = learned

    async def _rendered_ends(
        self,
        request: Mapping[str, Any],
        messages: list[Any],
        ends: list[int | None],
        full_b: bytes,
        first: int,
    ) -> tuple[list[int | None], int]:
        """Ends of ``messages[first:]`` from prefix renders, after ``ends[:first]``.

        ``messages[:i+1]`` rendered alone ends where message ``i`` ends — except when
        message ``i`` is an assistant message: llama.cpp renders a trailing assistant
        message as a prefill to continue (no end-of-turn), and no request field turns
        that off. Its end is found from the message after it instead: render
        ``messages[:i] + [messages[i+1]]``; what that adds after message ``i-1`` is
        message ``i+1``'s own rendering, which must end the span ``[?, end(i+1))``.
        """
        n = len(messages)
        ends = list(ends[:first])
        renders = 0
        deferred: list[int] = []
        for i in range(first, n):
            if role(messages[i]) == "assistant" and i < n - 1:
                ends.append(None)
                deferred.append(i)
                continue
            b = await self._render(request, messages[: i + 1])
            renders += 1
            prev = next((e for e in reversed(ends) if e is not None), 0)
            ok = b is not None and full_b.startswith(b) and len(b) >= prev
            ends.append(len(b) if ok and b is not None else None)
        for i in deferred:
            after, before = ends[i + 1], (ends[i - 1] if i > 0 else 0)
            if after is None or before is None:
                continue
            b = await self._render(request, [*messages[:i], messages[i + 1]])
            renders += 1
            if b is None or not full_b.startswith(b[:before]):
                continue
            tail = b[before:]
            end = after - len(tail)
            if end >= before and full_b[end:after] == tail:
                ends[i] = end
        return ends, renders

    async def _render(self, request: Mapping[str, Any], messages: list[Any]) -> bytes | None:
        part = {**request, "messages": messages, "add_generation_prompt": False}
        try:
            return (await self.client.apply_template(part)).encode("utf-8")
        except BackendRefused:
            return None  # e.g. a template that insists on alternating roles
