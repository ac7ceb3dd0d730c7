"""Token layouts measured against the real server: each message's exact token span is
what the server processes, and a growing conversation is tokenized only in its new text."""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from fixtures_llama import detokenize
from layout_chats import check_partition, conversation, run
from sakur4.backends.launcher import LlamaServer
from sakur4.backends.layout import TokenLayouts
from sakur4.backends.llamacpp import LlamaCppClient
from sakur4.errors import InputError


@pytest.mark.backend
def test_spans_tile_the_prompt_the_server_processes(llama_ring: LlamaServer) -> None:
    body = {"messages": conversation(2), "max_tokens": 1}

    async def go() -> Any:
        async with LlamaCppClient(llama_ring.url, timeout=120) as c:
            layout = await TokenLayouts(c).layout(body)
            whole = await c.tokenize(layout.prompt, add_special=True)
            texts = [await detokenize(c, layout.tokens[s.start : s.end]) for s in layout.spans]
            answer = await c.chat(body)
            return layout, whole, texts, answer

    layout, whole, texts, answer = run(go())
    check_partition(layout)
    # Each span is exactly one rendered message, header to end-of-turn (assistant
    # messages included, which the server renders as a prefill when they come last).
    for span, text in zip(layout.spans, texts, strict=True):
        assert text.startswith(f"<|im_start|>{span.role}\n")
        assert text.endswith("<|im_end|>\n")
        assert text.count("<|im_start|>") == 1
    assert layout.tokens == tuple(whole)
    assert answer.report.prompt_tokens == len(layout.tokens)
    assert all(s.clean_end and s.rendered_alone for s in layout.spans)
    assert [s.role for s in layout.spans] == [m["role"] for m in body["messages"]]
    # The layout shows what the server renders: this model's template renders the
    # assistant's tool calls (llama-server's ChatML fallback dropped them).
    assert '{"name": "read_file"' in layout.prompt
    assert layout.user_starts == tuple(s.start for s in layout.spans if s.role == "user")


@pytest.mark.backend
def test_layout_tokens_are_exactly_what_the_server_cached(llama_swa_full: LlamaServer) -> None:
    """With --swa-full every prefix is reusable, so the server reports reusing exactly
    the tokens of a prompt that shares them: the layout is what it processed."""
    body = {"messages": conversation(2), "max_tokens": 1, "id_slot": 0}

    async def go() -> Any:
        async with LlamaCppClient(llama_swa_full.url, timeout=120) as c:
            layout = await TokenLayouts(c).layout(body)
            await c.chat(body)
            extra = await c.tokenize(" and then some", add_special=False)
            again = await c.completion(
                {"prompt": [*layout.tokens, *extra], "n_predict": 1, "id_slot": 0}
            )
            cut = layout.spans[4].end  # after the second user message
            changed = await TokenLayouts(c).layout(
                {**body, "messages": [*body["messages"][:5], {"role": "user", "content": "Stop."}]}
            )
            return layout, again, cut, changed

    layout, again, cut, changed = run(go())
    assert again.report.reused == len(layout.tokens)
    # A prompt that keeps messages 0..4 keeps their tokens exactly: a cut is stable.
    assert changed.tokens[:cut] == layout.tokens[:cut]
    assert changed.spans[4].end == cut


@pytest.mark.backend
def test_a_growing_conversation_is_not_tokenized_from_the_start(
    llama_ring: LlamaServer,
) -> None:
    tag = secrets.token_hex(3)
    turns = [conversation(n, tag) for n in (5, 6, 7)]

    async def go() -> Any:
        async with LlamaCppClient(llama_ring.url, timeout=120) as c:
            cached = TokenLayouts(c, verify=True)  # verify: also tokenize the whole and compare
            grown = [await cached.layout({"messages": m}) for m in turns]
            fresh = [await TokenLayouts(c).layout({"messages": m}) for m in turns]
            return grown, fresh

    grown, fresh = run(go())
    assert grown[0].method == "full"
    for g, f in zip(grown[1:], fresh[1:], strict=True):
        assert g.method == "incremental"  # verify=True would have said "full" on a mismatch
        assert g.tokens == f.tokens
        assert g.spans == f.spans
        assert g.tokenized_bytes < len(g.prompt.encode()) / 3
        assert g.renders < f.renders
    for layout in grown:
        check_partition(layout)


def test_a_request_without_messages_is_refused() -> None:
    layouts = TokenLayouts(LlamaCppClient("http://127.0.0.1:9", timeout=1))
    with pytest.raises(InputError, match="non-empty list of messages"):
        run(layouts.layout({"messages": []}))
