"""The vLLM client against the real vLLM server (slow tier: ``-m vllm``), plus the pure
parts (block reuse, the metrics text) without it.

Each conversation starts with a fresh nonce, so nothing another test sent is cached
for it: its first request reuses nothing, and every later reuse is what this test sent.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from sakur4.backends.layout import TokenLayout
from sakur4.backends.vllm import (
    BLOCK_TOKENS,
    VllmClient,
    block_reuse,
    parse_metrics,
)
from sakur4.backends.vllm_layout import VllmLayouts
from sakur4.backends.vllm_server import SERVED_MODEL, VllmServer
from sakur4.probe import probe
from sakur4.settings import Settings

WORDS = str.split(
    "the of and to in is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there been one all we their has would when"
)


def text(n: int, seed: int) -> str:
    return " ".join(WORDS[(i * 7 + seed) % len(WORDS)] for i in range(n))


def conversation(turns: int) -> list[dict[str, Any]]:
    """A system prompt (~700 tokens, led by a nonce) and ``turns`` user/assistant pairs."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"Session {uuid.uuid4()}. " + text(600, 1)}
    ]
    for t in range(turns):
        messages.append({"role": "user", "content": f"Question {t}: " + text(120, t + 2)})
        messages.append({"role": "assistant", "content": f"Answer {t}: " + text(60, t + 3)})
    return messages


def common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def test_block_reuse_is_whole_blocks_and_never_the_last_token() -> None:
    assert block_reuse(0, 500) == 0
    assert block_reuse(127, 500) == 0
    assert block_reuse(300, 500) == 2 * BLOCK_TOKENS
    # the whole prompt cached: the block holding the last token is computed again
    assert block_reuse(512, 512) == 3 * BLOCK_TOKENS
    assert block_reuse(513, 513) == 4 * BLOCK_TOKENS


def test_metrics_text_is_summed_by_name() -> None:
    text_ = (
        "# HELP vllm:prefix_cache_hits_total hits\n"
        "# TYPE vllm:prefix_cache_hits_total counter\n"
        'vllm:prefix_cache_hits_total{engine="0",model_name="gemma3"} 2560.0\n'
        'vllm:prompt_tokens_cached_total{engine="0",model_name="gemma3"} 2560.0\n'
        'vllm:prompt_tokens_cached_total{engine="1",model_name="gemma3"} 128.0\n'
        "garbage line\n"
    )
    got = parse_metrics(text_)
    assert got["vllm:prefix_cache_hits_total"] == 2560.0
    assert got["vllm:prompt_tokens_cached_total"] == 2688.0


async def detokenize(client: VllmClient, tokens: tuple[int, ...]) -> str:
    """The text of ``tokens`` (only tests need it: they check spans with it)."""
    answer = await client.post_json("/detokenize", {"model": SERVED_MODEL, "tokens": list(tokens)})
    return str(answer["prompt"])


def client_of(server: VllmServer) -> VllmClient:
    return VllmClient(server.url, timeout=300.0, model=SERVED_MODEL)


def check_spans(layout: TokenLayout, n_messages: int) -> None:
    assert len(layout.spans) == n_messages
    pos = 0
    for span in layout.spans:
        assert span.start == pos
        pos = span.end
    assert pos == layout.generation_start <= len(layout.tokens)


@pytest.mark.backend
@pytest.mark.vllm
def test_layout_is_what_vllm_counts_and_spans_hold_their_messages(
    vllm_server: VllmServer,
) -> None:
    async def go() -> None:
        async with client_of(vllm_server) as client:
            layouts = VllmLayouts(client)
            messages = [*conversation(2), {"role": "user", "content": "Say ok."}]
            body = {"model": SERVED_MODEL, "messages": messages, "max_tokens": 1}
            layout = await layouts.layout(body)
            check_spans(layout, len(messages))
            answer = await client.chat(body)
            assert answer.report.prompt_tokens == len(layout.tokens)
            # Each user/assistant span holds exactly its message's turn (Gemma's template
            # folds the system prompt into the first user turn: that span holds both).
            for span, m in zip(layout.spans[1:], messages[1:], strict=True):
                shown = await detokenize(client, layout.tokens[span.start : span.end])
                assert m["content"].strip() in shown
                assert span.clean_end
            system = layout.spans[0]
            assert system.end - system.start == 1  # <bos>: the content renders in turn 1
            first = await detokenize(client, layout.tokens[: layout.spans[1].end])
            assert messages[0]["content"].strip() in first
            # A grown conversation asks only for the new messages' prefixes.
            grown = [*messages, {"role": "assistant", "content": "ok"}]
            grown.append({"role": "user", "content": "Again."})
            again = await layouts.layout({**body, "messages": grown})
            assert again.renders == 1 + 2
            assert (
                again.tokens[: layout.generation_start] == layout.tokens[: layout.generation_start]
            )
            answer = await client.chat({**body, "messages": grown})
            assert answer.report.prompt_tokens == len(again.tokens)

    asyncio.run(go())


@pytest.mark.backend
@pytest.mark.vllm
def test_reuse_is_cached_tokens_and_the_metrics_deltas(vllm_server: VllmServer) -> None:
    async def go() -> None:
        async with client_of(vllm_server) as client:
            layouts = VllmLayouts(client)
            messages = [*conversation(1), {"role": "user", "content": "Say ok."}]
            sent: tuple[int, ...] = ()
            for step in range(3):
                body = {"model": SERVED_MODEL, "messages": messages, "max_tokens": 1}
                layout = await layouts.layout(body)
                before = await client.cache_counters()
                if step == 2:  # streamed: the usage chunk reports it the same way
                    async with client.chat_stream(body) as stream:
                        async for _ in stream:
                            pass
                    report = stream.report
                else:
                    report = (await client.chat(body)).report
                after = await client.cache_counters()
                expected = block_reuse(common_prefix(sent, layout.tokens), len(layout.tokens))
                assert report.source == "usage"
                assert report.prompt_tokens == len(layout.tokens)
                assert report.reused == expected, (step, report, expected)
                for name in ("vllm:prefix_cache_hits_total", "vllm:prompt_tokens_cached_total"):
                    assert after[name] - before[name] == expected, (step, name)
                sent = layout.tokens
                messages = [
                    *messages,
                    {"role": "assistant", "content": "ok"},
                    {"role": "user", "content": f"Next {step}: " + text(200, step)},
                ]
            assert expected > 0

    asyncio.run(go())


@pytest.mark.backend
@pytest.mark.vllm
def test_probe_names_vllm_exact_and_verified(vllm_server: VllmServer) -> None:
    found = asyncio.run(probe(vllm_server.url, Settings(backend_timeout=120.0)))
    assert found.kind == "vllm"
    assert found.n_ctx == 8192
    assert found.exact_tokenization is True
    assert found.reuse_verifiable is True
    assert found.reuse_field == "usage.prompt_tokens_details.cached_tokens"
    assert found.checkpoint_source == "exact-prefix"
    assert "128-token blocks" in found.reason
    assert found.messages_api is True
