"""The chat template's wrappers: the proof that ends a message in one render, the ends
it gives held against prefix renders on the real server (ChatML and Gemma 3's
template), and prompts built without a render once renders confirmed them.

The render counts are held on llama-server's ChatML fallback (``llama_fallback``), which
renders no tool calls: the packaged model's template renders them, and a message with
tool calls is not its wrapper around its content, so it is measured with prefix renders
(issue 41: 27 renders for the 12-turn conversation there, 17 for the changed message)."""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from layout_chats import check_partition, conversation, growing, run
from sakur4.backends.launcher import LlamaServer
from sakur4.backends.layout import TokenLayout, TokenLayouts
from sakur4.backends.layout.wrappers import TemplateWrappers, Wrapper, learn
from sakur4.backends.llamacpp import LlamaCppClient


def test_a_wrapper_ends_a_message_only_where_its_bytes_match() -> None:
    """The proof behind a one-render end: the bytes at the message's place are exactly
    its kind's wrapper around its content (as sent, or trimmed)."""
    user = {"role": "user", "content": " hi \n"}
    wrapper = learn([user], b"<|im_start|>user\n hi \n<|im_end|>\n")
    assert wrapper == Wrapper((b"<|im_start|>user\n", b"<|im_end|>\n"))
    first = b"<s><|im_start|>user\nhi<|im_end|>\n"
    full = first + b"<|im_start|>user\nhello<|im_end|>\n"
    end = len(first)
    assert wrapper.end_after([user], full, 3) == end  # the template trimmed the content
    other = {"role": "user", "content": "hell"}
    assert wrapper.end_after([other], full, end) is None  # not this message's bytes
    assert wrapper.end_after([user], full, end) is None
    assert wrapper.start_before([{"role": "user", "content": "hello"}], full, len(full)) == end
    # A content found twice in its piece teaches nothing (its place is ambiguous).
    assert learn([{"role": "user", "content": "a"}], b"<a>a</a>") is None


def _two_assistants(tag: str) -> list[dict[str, Any]]:
    """An answer and then a tool call, both assistant messages, in a row."""
    msgs = conversation(2, tag)
    return [
        *msgs[:2],
        {"role": "assistant", "content": "Let me look first."},
        *msgs[2:],
    ]


def _system_in_the_middle(tag: str) -> list[dict[str, Any]]:
    msgs = conversation(3, tag)
    return [*msgs[:4], {"role": "system", "content": "Reminder: stay terse."}, *msgs[4:]]


def _whitespace(tag: str) -> list[dict[str, Any]]:
    """Contents a template may trim, and an assistant message with calls and no text."""
    call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    return [
        {"role": "system", "content": f"  [{tag}] Be brief.\n\n"},
        {"role": "user", "content": "\n  list the files  \n"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py\nb.py\n"},
        {"role": "user", "content": " thanks "},
    ]


def _gemma_chat(tag: str, turns: int = 6) -> list[dict[str, Any]]:
    """A conversation Gemma 3's template accepts: system first, then user and model in turn."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": f"[{tag}] You are terse.\n"}]
    for i in range(turns):
        msgs.append({"role": "user", "content": f"  Question {i}: what is in file_{i}.py?\n"})
        msgs.append({"role": "assistant", "content": f"It defines f{i}() 🎉 \n"})
    msgs.append({"role": "user", "content": "Summarise."})
    return msgs


async def _both(url: str, messages: list[dict[str, Any]]) -> tuple[TokenLayout, TokenLayout]:
    async with LlamaCppClient(url, timeout=120) as c:
        one = await TokenLayouts(c, verify=True).layout({"messages": messages})
        reference = await TokenLayouts(c, one_render=False).layout({"messages": messages})
        return one, reference


def check_same_ends(one: TokenLayout, reference: TokenLayout) -> None:
    """The one-render ends are the prefix-render ends wherever those are known, and the
    spans tile the same tokens."""
    assert one.tokens == reference.tokens
    for got, want in zip(one.message_byte_ends, reference.message_byte_ends, strict=True):
        if want is not None:
            assert got == want
    for got, want in zip(one.spans, reference.spans, strict=True):
        if want.rendered_alone:
            assert got == want
    check_partition(one)


@pytest.mark.backend
@pytest.mark.parametrize(
    "shape",
    [
        lambda tag: conversation(8, tag),
        _two_assistants,
        _system_in_the_middle,
        _whitespace,
        # Ends with an assistant message (the server continues it: a prefill).
        lambda tag: [*conversation(2, tag), {"role": "assistant", "content": "Partly: "}],
    ],
    ids=["tool-calls", "two-assistants", "system-in-the-middle", "whitespace", "ends-assistant"],
)
def test_one_render_ends_are_the_prefix_render_ends(llama_ring: LlamaServer, shape: Any) -> None:
    one, reference = run(_both(llama_ring.url, shape(secrets.token_hex(3))))
    check_same_ends(one, reference)
    assert one.renders <= reference.renders


@pytest.mark.backend
def test_a_long_conversation_is_measured_with_a_few_renders(llama_fallback: LlamaServer) -> None:
    one, reference = run(_both(llama_fallback.url, conversation(12, secrets.token_hex(3))))
    check_same_ends(one, reference)
    assert one.message_byte_ends == reference.message_byte_ends
    # One render of the whole, and one prefix render for each kind of message (the
    # first, a user message, an assistant message with calls, a tool result): not one
    # a message as the prefix renders take.
    assert reference.renders > 3 * 12
    assert one.renders <= 6


@pytest.mark.backend
def test_gemma_template_one_render_ends_are_the_prefix_render_ends(
    llama_gemma: LlamaServer,
) -> None:
    """Gemma 3's template folds the system prompt into the first user turn, trims every
    content and refuses a prefix that ends in two user turns (so an assistant message's
    own end cannot be rendered): the ends still come from the one render."""
    tag = secrets.token_hex(3)
    one, reference = run(_both(llama_gemma.url, _gemma_chat(tag)))
    assert "<start_of_turn>model\n" in one.prompt  # the real template, not ChatML
    assert one.message_byte_ends == reference.message_byte_ends
    assert one.spans == reference.spans
    assert reference.renders >= 13
    assert one.renders <= 6


@pytest.mark.backend
def test_a_changed_message_is_not_rendered_again(llama_fallback: LlamaServer) -> None:
    """A plan that folds a message in the middle: the ends of it and of every message
    after it come from the one render (checked against its kind's wrapper)."""
    tag = secrets.token_hex(3)
    first = conversation(8, tag)
    folded = [dict(m) for m in first]
    folded[6] = {**folded[6], "content": "[masked: def f1(), 1 line]"}
    # The next turn: the messages of a step (kinds the layouts have seen) appended.
    grown = [*folded, *conversation(9, tag)[-4:]]

    async def go() -> Any:
        async with LlamaCppClient(llama_fallback.url, timeout=120) as c:
            layouts = TokenLayouts(c, verify=True)
            await layouts.layout({"messages": first})
            again = await layouts.layout({"messages": grown})
            reference = await TokenLayouts(c, one_render=False).layout({"messages": grown})
            return again, reference

    again, reference = run(go())
    assert again.renders == 1  # the whole request only
    assert again.method == "incremental"
    assert again.message_byte_ends == reference.message_byte_ends
    assert again.spans == reference.spans


async def _grow(url: str, turns: list[list[dict[str, Any]]]) -> list[tuple[TokenLayout, Any]]:
    """Each request of a growing conversation through one cache, beside a fresh prefix-
    render layout of the same request (the reference)."""
    out = []
    async with LlamaCppClient(url, timeout=120) as c:
        layouts = TokenLayouts(c)
        for messages in turns:
            got = await layouts.layout({"messages": messages})
            reference = await TokenLayouts(c, one_render=False).layout({"messages": messages})
            out.append((got, reference))
    return out


@pytest.mark.backend
@pytest.mark.parametrize("template", ["chatml", "gemma"])
def test_a_conversation_that_only_grew_is_built_without_a_render(
    llama_fallback: LlamaServer, llama_gemma: LlamaServer, template: str
) -> None:
    """Once renders have confirmed a construction twice, a turn that only appends
    messages of kinds seen before is built from the learned pieces with no render, and
    its layout is the prefix renders' own, token for token (issue 17: the render of the
    whole request was the largest single part of a turn's cost at 100k tokens)."""
    tag = secrets.token_hex(3)
    if template == "chatml":
        url, turns = llama_fallback.url, growing(conversation(7, tag), 7, 3)
    else:
        # Gemma trims every content: the trimming is learned before a build relies on it.
        url, turns = llama_gemma.url, growing(_gemma_chat(tag, 8), 8, 2)
    results = run(_grow(url, turns))
    renders = [got.renders for got, _ in results]
    assert all(r >= 1 for r in renders[:3]), renders  # first sight, then two confirmations
    if template == "chatml":
        assert renders[3:], renders
        assert all(r == 0 for r in renders[3:]), renders
    else:
        # Not built yet on Gemma's template (docs/design/gateway.md): an assistant
        # message's end is never rendered alone there, so how the template trims its
        # content is not learned, and every turn is still rendered: correct, not faster.
        assert all(r >= 1 for r in renders), renders
    for got, reference in results:
        assert got.prompt == reference.prompt
        assert got.tokens == reference.tokens
        assert got.message_byte_ends == reference.message_byte_ends
        assert got.spans == reference.spans


@pytest.mark.backend
def test_a_distrusted_context_is_rendered_again(llama_fallback: LlamaServer) -> None:
    """The gateway calls ``distrust`` when the server counted another prompt than a
    built one: from then on that context is rendered, never built."""
    turns = growing(conversation(7, secrets.token_hex(3)), 7, 3)

    async def go() -> list[int]:
        async with LlamaCppClient(llama_fallback.url, timeout=120) as c:
            layouts = TokenLayouts(c)
            seen = []
            for i, messages in enumerate(turns):
                got = await layouts.layout({"messages": messages})
                seen.append(got.renders)
                if i == 3:
                    assert got.renders == 0
                    layouts.distrust(got)
            return seen

    renders = run(go())
    assert all(r >= 1 for r in renders[4:]), renders


def test_a_render_that_disagrees_with_the_construction_stops_it() -> None:
    """One render that differs from the prompt built for the same request (a template
    that renders an earlier message differently once more follow it) ends building
    for that context for good."""
    wrappers = TemplateWrappers(LlamaCppClient("http://127.0.0.1:9", timeout=1))
    msgs = [{"role": "user", "content": "a"}]
    built = (b"<u>a</u><gen>", None, 1, [8])
    wrappers.learn_render("ctx", msgs, [8], b"<u>a</u><gen>", built)  # type: ignore[arg-type]
    assert not wrappers.trusted("ctx")
    wrappers.learn_render("ctx", msgs, [8], b"<u>a</u><gen>", built)  # type: ignore[arg-type]
    assert wrappers.trusted("ctx")  # CONFIRMATIONS renders agreed
    wrappers.learn_render("ctx", msgs, [8], b"<u>A</u><gen>", built)  # type: ignore[arg-type]
    assert not wrappers.trusted("ctx")
    wrappers.learn_render("ctx", msgs, [8], b"<u>a</u><gen>", built)  # type: ignore[arg-type]
    wrappers.learn_render("ctx", msgs, [8], b"<u>a</u><gen>", built)  # type: ignore[arg-type]
    assert not wrappers.trusted("ctx")
