"""Token layout: each message's exact token span, checked against the real server."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import pytest

from fixtures_llama import detokenize
from sakur4.backends.layout import TokenLayout, TokenLayouts, _spans
from sakur4.backends.llamacpp import LlamaCppClient
from sakur4.backends.local import LlamaServer
from sakur4.errors import InputError


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def conversation(turns: int, tag: str | None = None) -> list[dict[str, Any]]:
    tag = tag or secrets.token_hex(3)
    msgs: list[dict[str, Any]] = [{"role": "system", "content": f"[{tag}] You are terse."}]
    for i in range(turns):
        msgs.append({"role": "user", "content": f"Question {i}: what is in file_{i}.py?\n"})
        msgs.append(
            {
                "role": "assistant",
                "content": f"Reading file_{i}.py 🎉",
                "tool_calls": [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": f'{{"n": {i}}}'},
                    }
                ],
            }
        )
        msgs.append(
            {"role": "tool", "tool_call_id": f"call_{i}", "content": f"def f{i}(): 日本語 {i}"}
        )
    msgs.append({"role": "user", "content": "Summarise."})
    return msgs


def check_partition(layout: TokenLayout) -> None:
    """The spans tile the prompt: BOS, then each message, then the generation prompt."""
    start = layout.spans[0].start
    assert start == 1  # the BOS the server adds
    for s in layout.spans:
        assert s.start == start
        assert s.end >= s.start
        start = s.end
    assert layout.generation_start == start
    joined = list(layout.tokens[:1])
    for s in layout.spans:
        joined += layout.tokens[s.start : s.end]
    joined += layout.tokens[layout.generation_start :]
    assert tuple(joined) == layout.tokens


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
    # ChatML (the fallback for this model) renders no assistant tool calls: the
    # layout shows what the server renders, not what was sent.
    assert "read_file" not in layout.prompt
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


def test_a_token_straddling_a_boundary_ends_the_earlier_span_unclean() -> None:
    # Text "ab|cd|ef" where the tokenizer merged "bc" across the first boundary.
    offsets = [0, 0, 1, 3, 4]  # BOS, "a", "bc", "d", "ef"
    spans, gen = _spans(
        [{"role": "user"}, {"role": "assistant"}, {"role": "user"}],
        [2, 4, 6],
        offsets,
        n_bytes=6,
        n_lead=1,
        n_tokens=5,
    )
    assert [(s.start, s.end, s.clean_end) for s in spans] == [
        (1, 2, False),
        (2, 4, True),
        (4, 5, True),
    ]
    assert gen == 5


def test_an_unknown_boundary_gives_an_empty_span() -> None:
    spans, _ = _spans(
        [{"role": "system"}, {"role": "user"}],
        [None, 4],
        [0, 0, 2],
        n_bytes=4,
        n_lead=1,
        n_tokens=3,
    )
    assert (spans[0].start, spans[0].end, spans[0].rendered_alone) == (1, 1, False)
    assert (spans[1].start, spans[1].end) == (1, 3)


def test_a_request_without_messages_is_refused() -> None:
    layouts = TokenLayouts(LlamaCppClient("http://127.0.0.1:9", timeout=1))
    with pytest.raises(InputError, match="non-empty list of messages"):
        run(layouts.layout({"messages": []}))
