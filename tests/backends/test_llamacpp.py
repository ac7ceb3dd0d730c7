"""The client against a real llama-server: every endpoint, and what it reports."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import pytest

from fixtures_llama import detokenize
from sakur4.backends.launcher import LlamaServer
from sakur4.backends.llamacpp import LlamaCppClient
from sakur4.errors import BackendRefused, ContextOverflow

pytestmark = pytest.mark.backend


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def fresh_words(n: int) -> str:
    """Text no earlier test sent, so the server has nothing of it cached."""
    tag = secrets.token_hex(4)
    return f"{tag} " + " ".join(f"word{i % 37} item" for i in range(n))


def test_props_slots_models_and_health(llama_ring: LlamaServer) -> None:
    async def go() -> Any:
        async with LlamaCppClient(llama_ring.url, timeout=60) as c:
            await c.health()
            return await c.props(), await c.slots(), await c.models()

    props, slots, models = run(go())
    assert props.n_ctx == 8192  # -c 8192, -np 1
    assert props.total_slots == 1
    assert props.build is not None
    assert props.build.startswith("b11434")
    assert props.endpoint_metrics  # --metrics
    assert "<|im_start|>" in (props.chat_template or "")  # the ChatML fallback
    assert [s.id for s in slots] == [0]
    assert slots[0].n_ctx == 8192
    assert models["data"][0]["meta"]["n_ctx_train"] == 32768


def test_tokenize_detokenize_and_template(llama_ring: LlamaServer) -> None:
    async def go() -> Any:
        async with LlamaCppClient(llama_ring.url, timeout=60) as c:
            text = "naïve café 日本語 🎉 done"
            tokens = await c.tokenize(text)
            pieces = await c.tokenize_pieces(text)
            back = await detokenize(c, tokens)
            with_bos = await c.tokenize(text, add_special=True)
            prompt = await c.apply_template({"messages": [{"role": "user", "content": "hi"}]})
            return text, tokens, pieces, back, with_bos, prompt

    text, tokens, pieces, back, with_bos, prompt = run(go())
    assert back == text
    assert [t for t, _ in pieces] == tokens
    assert b"".join(p for _, p in pieces) == text.encode()  # pieces spell the text
    assert with_bos[1:] == tokens  # add_special puts BOS in front
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_completion_reports_processed_and_reused(llama_ring: LlamaServer) -> None:
    text = fresh_words(30)

    async def go() -> Any:
        async with LlamaCppClient(llama_ring.url, timeout=120) as c:
            first = await c.completion({"prompt": text, "n_predict": 1, "id_slot": 0})
            again = await c.completion({"prompt": text + " more", "n_predict": 1, "id_slot": 0})
            return first, again

    first, again = run(go())
    assert first.report.source == "timings"
    assert first.report.reused is not None
    assert first.report.processed is not None
    assert first.report.reused + first.report.processed == first.report.prompt_tokens
    assert first.report.prompt_ms is not None
    assert first.report.prompt_ms > 0
    assert again.report.reused is not None
    assert again.report.reused > 0  # the appended prompt reused the cached one


def test_chat_plain_and_streaming_report_reuse(llama_ring: LlamaServer) -> None:
    body = {
        "messages": [{"role": "user", "content": fresh_words(40)}],
        "max_tokens": 3,
        "id_slot": 0,
    }

    async def go() -> Any:
        async with LlamaCppClient(llama_ring.url, timeout=120) as c:
            plain = await c.chat(body)
            chunks = []
            async with c.chat_stream(body) as stream:
                async for chunk in stream:
                    chunks.append(chunk.payload)
            return plain, chunks, stream.report

    plain, chunks, streamed = run(go())
    assert plain.json["usage"]["completion_tokens"] <= 3  # max_tokens passed through
    assert plain.report.prompt_tokens == streamed.prompt_tokens
    assert streamed.source == "timings"
    assert streamed.reused is not None
    assert streamed.reused > 0  # the same prompt again: reused
    assert chunks[-1]["choices"] == []  # the usage chunk comes last
    assert "usage" in chunks[-1]
    # The answer arrived as deltas before the usage chunk; its text may be empty (the
    # packaged model can stop at once under ChatML), so the deltas' end is what is judged.
    deltas = [c["choices"][0] for c in chunks[:-1] if c["choices"]]
    assert deltas
    assert deltas[-1]["finish_reason"] in ("stop", "length")


def test_real_context_overflow(llama_ring: LlamaServer) -> None:
    async def go() -> Any:
        async with LlamaCppClient(llama_ring.url, timeout=60) as c:
            await c.completion({"prompt": [1000] * 8300, "n_predict": 1})

    with pytest.raises(ContextOverflow, match=r"8300 tokens.*8192") as e:
        run(go())
    assert llama_ring.url in str(e.value)


def test_slot_actions_refused_without_slot_save_path(llama_ring: LlamaServer) -> None:
    async def go() -> Any:
        async with LlamaCppClient(llama_ring.url, timeout=60) as c:
            await c.slot_action(0, "save", "x.bin")

    with pytest.raises(BackendRefused, match="--slot-save-path") as e:
        run(go())
    assert e.value.status == 501


def test_slot_actions_work_with_slot_save_path(llama_slots: LlamaServer) -> None:
    async def go() -> Any:
        async with LlamaCppClient(llama_slots.url, timeout=120) as c:
            await c.completion({"prompt": fresh_words(20), "n_predict": 1, "id_slot": 0})
            saved = await c.slot_action(0, "save", "t.bin")
            erased = await c.slot_action(0, "erase")
            restored = await c.slot_action(0, "restore", "t.bin")
            with pytest.raises(BackendRefused) as bad:
                await c.slot_action(0, "save", "../escape.bin")
            return saved, erased, restored, bad.value

    saved, erased, restored, bad = run(go())
    assert saved["n_saved"] == erased["n_erased"] == restored["n_restored"]
    assert saved["n_saved"] > 20
    assert bad.status == 400
