"""The layout cache: the hash chain that names message prefixes, and the bounded cache
of layouts found again by the prefix a new request shares with them (pure: the layouts
here are made by hand; tests/backends/layout/test_measure.py grows real ones)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sakur4.backends.layout.cache import LayoutCache, canonical, prefix_hashes
from sakur4.backends.layout.spans import MessageSpan, TokenLayout, role


def _chat(*contents: str) -> list[dict[str, Any]]:
    roles = ["system"] + ["user" if i % 2 else "assistant" for i in range(1, len(contents))]
    return [{"role": r, "content": c} for r, c in zip(roles, contents, strict=True)]


def _layout(messages: list[dict[str, Any]], context: str = "{}") -> TokenLayout:
    """A layout of a tag template (``<role>content</role>``, a byte a token, no BOS)."""
    rendered = [f"<{m['role']}>{m['content']}</{m['role']}>" for m in messages]
    ends, pos = [], 0
    for text in rendered:
        pos += len(text)
        ends.append(pos)
    prompt = "".join(rendered) + "<gen>"
    spans = tuple(
        MessageSpan(i, role(m), s, e, True, True)
        for i, (m, s, e) in enumerate(zip(messages, [0, *ends], ends, strict=False))
    )
    return TokenLayout(
        prompt=prompt,
        tokens=tuple(prompt.encode()),
        spans=spans,
        generation_start=pos,
        method="full",
        renders=1,
        tokenized_bytes=len(prompt),
        token_bytes=tuple(range(len(prompt))),
        prefix_hashes=prefix_hashes({"messages": messages}),
        message_byte_ends=tuple(ends),
        context=context,
    )


def test_requests_sharing_a_message_prefix_share_its_chain() -> None:
    a = prefix_hashes({"messages": _chat("s", "u1", "a1", "u2")})
    b = prefix_hashes({"messages": _chat("s", "u1", "a1", "other")})
    assert a[:3] == b[:3]
    assert a[3] != b[3]
    # The tools are part of what the template renders: another tool list, another chain.
    tools = [{"type": "function", "function": {"name": "ls"}}]
    assert prefix_hashes({"messages": _chat("s"), "tools": tools})[0] != a[0]


def test_a_known_chain_is_reused_only_as_far_as_the_messages_are_equal() -> None:
    """The entries reused from an earlier request are exactly those computed afresh."""
    first = _chat("s", "u1", "a1", "u2")
    grown = [*first[:3], {"role": "user", "content": "changed"}, *_chat("s", "u3")[1:]]
    fresh = prefix_hashes({"messages": grown})
    assert prefix_hashes({"messages": grown}, (first, prefix_hashes({"messages": first}))) == fresh


def test_a_grown_request_finds_its_longest_cached_prefix() -> None:
    cache = LayoutCache()
    short = _chat("s", "u1", "a1", "u2")
    cache.remember(_layout(short))
    grown = [*short, *_chat("s", "a2", "u3")[1:]]
    prompt = _layout(grown).prompt.encode()
    base, k = cache.lookup(prefix_hashes({"messages": grown}), prompt, grown)
    assert base is not None
    assert k == 4
    assert base.message_byte_ends[k - 1] == len(_layout(short).prompt) - len("<gen>")


def test_a_prefix_ending_in_an_assistant_message_is_not_reused() -> None:
    """Its end was measured with something else (or nothing) after it."""
    cache = LayoutCache()
    three = _chat("s", "u1", "a1")
    cache.remember(_layout(three))
    grown = [*three, {"role": "user", "content": "u2"}]
    hashes = prefix_hashes({"messages": grown})
    base, k = cache.lookup(hashes, _layout(grown).prompt.encode(), grown)
    assert k == 2  # up to the user message, not the assistant message after it
    assert base is not None


def test_a_prefix_whose_text_changed_is_not_reused() -> None:
    """Same messages, other rendered bytes (the template's other inputs changed what it
    renders): the cached layout is not extended."""
    cache = LayoutCache()
    chat = _chat("s", "u1", "a1", "u2")
    cache.remember(_layout(chat))
    other = _layout(chat).prompt.replace("<system>", "<system >").encode()
    assert cache.lookup(prefix_hashes({"messages": chat}), other, chat) == (None, 0)


def test_the_cache_keeps_at_most_its_bound_and_drops_the_least_recently_used() -> None:
    cache = LayoutCache(max_layouts=2)
    chats = [_chat(f"s{i}", "u") for i in range(3)]
    cache.remember(_layout(chats[0]))
    cache.remember(_layout(chats[1]))
    hashes0 = prefix_hashes({"messages": chats[0]})
    assert cache.lookup(hashes0, _layout(chats[0]).prompt.encode(), chats[0])[1] == 2
    cache.remember(_layout(chats[2]))  # chats[1] is now the least recently used
    assert len(cache) == 2
    hashes1 = prefix_hashes({"messages": chats[1]})
    assert cache.lookup(hashes1, _layout(chats[1]).prompt.encode(), chats[1]) == (None, 0)
    assert cache.lookup(hashes0, _layout(chats[0]).prompt.encode(), chats[0])[1] == 2


def test_a_layout_without_token_offsets_is_not_kept() -> None:
    cache = LayoutCache()
    cache.remember(replace(_layout(_chat("s", "u")), token_bytes=()))
    assert len(cache) == 0


def test_a_forgotten_context_is_not_found_again() -> None:
    cache = LayoutCache()
    chat = _chat("s", "u1", "a1", "u2")
    cache.remember(_layout(chat, context="A"))
    cache.remember(_layout(_chat("t", "u"), context="B"))
    grown = [*chat, *_chat("s", "a2", "u3")[1:]]
    hashes = prefix_hashes({"messages": grown})
    assert cache.grown_from(hashes, "A")[1] == 4
    assert cache.grown_from(hashes, "B") == (None, 0)  # another context's layouts: not this
    cache.forget("A")
    assert len(cache) == 1
    assert cache.grown_from(hashes, "A") == (None, 0)


def test_hashes_reuse_the_last_chain_of_a_conversation() -> None:
    """Each turn's chain from the cache equals the chain computed from nothing: one that
    grew, one where a plan changed a message in the middle, and one that grew after it."""
    cache = LayoutCache()
    context = canonical({}).decode()
    first = _chat("s", "u1", "a1", "u2")
    folded = [*first[:2], {"role": "assistant", "content": "[folded]"}, *first[3:]]
    turns = [first, [*first, *_chat("s", "a2", "u3")[1:]]]
    turns += [[*folded, *turns[1][4:]], [*folded, *turns[1][4:], *_chat("s", "a3", "u4")[1:]]]
    for messages in turns:
        assert cache.hashes({"messages": messages}, context) == prefix_hashes(
            {"messages": messages}
        )
