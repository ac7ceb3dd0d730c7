"""The clients of the kinds that cannot run here, against fakes of their documented
shapes (tests/fake_kinds.py): what each field is read as, where each window comes
from, and the estimated layout's promises (an upper bound once calibrated; stand-in
tokens shared exactly as far as whole messages are)."""

from __future__ import annotations

import asyncio
from typing import Any

from fake_kinds import MODEL, FakeServer, usage_of
from sakur4.backends.estimate import MARGIN, EstimatedLayouts
from sakur4.backends.kinds import open_backend, token_layouts
from sakur4.backends.layout import TokenLayout
from sakur4.backends.lmstudio import LmStudioClient
from sakur4.backends.ollama import OllamaClient
from sakur4.backends.openai_compat import OpenAICompatClient
from sakur4.backends.report import read_report
from sakur4.backends.sglang import SglangClient
from sakur4.settings import Settings

URL = "http://fake:1"


def chat(turn: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You write code. " * 40}]
    for t in range(turn):
        messages += [
            {"role": "user", "content": f"question {t}: " + "why is the sky blue? " * 10},
            {"role": "assistant", "content": f"answer {t}: " + "scattering of light. " * 12},
        ]
    messages.append({"role": "user", "content": f"question {turn}: and the sea?"})
    return {"model": MODEL, "messages": messages, "max_tokens": 1}


def test_fake_sglang_null_reads_as_not_reported_without_the_cache_report_flag() -> None:
    async def go() -> list[Any]:
        fake = FakeServer("sglang", reports_reuse=False)
        async with SglangClient(URL, timeout=5, transport=fake) as c:
            return [(await c.chat(chat(1))).report.reused for _ in range(2)]

    assert asyncio.run(go()) == [None, None]


def test_fake_sglang_null_reads_as_zero_once_the_flag_was_seen() -> None:
    async def go() -> list[Any]:
        fake = FakeServer("sglang", reports_reuse=True)
        async with SglangClient(URL, timeout=5, cache_report=True, transport=fake) as c:
            first = (await c.chat(chat(1))).report
            again = (await c.chat(chat(1))).report
            return [first.reused, first.processed, again.reused > 0, again.source]

    assert asyncio.run(go()) == [0, usage_of(chat(1)), True, "usage"]


def test_fake_sglang_stream_reads_its_usage_chunk_the_same_way() -> None:
    async def go() -> Any:
        fake = FakeServer("sglang", reports_reuse=True)
        client = SglangClient(URL, timeout=5, cache_report=True, transport=fake)
        async with client as c, c.chat_stream(chat(1)) as events:
            async for _ in events:
                pass
            return events.report

    report = asyncio.run(go())
    assert (report.reused, report.prompt_tokens) == (0, usage_of(chat(1)))


def test_fake_ollama_window_is_the_loaded_one_then_the_modelfile_then_the_setting() -> None:
    async def go(fake: FakeServer, window: int | None) -> tuple[int | None, int | None]:
        async with OllamaClient(URL, timeout=5, model=MODEL, window=window, transport=fake) as c:
            before = await c.context_window()
            await c.chat(chat(0))
            return before, await c.context_window()

    assert asyncio.run(go(FakeServer("ollama", window=32768), None)) == (None, 32768)
    fake = FakeServer("ollama", window=32768, modelfile_ctx=16384)
    assert asyncio.run(go(fake, None)) == (16384, 32768)
    assert asyncio.run(go(FakeServer("ollama", window=4096), 8192)) == (8192, 4096)


def test_fake_ollama_openai_route_reports_cached_tokens_where_the_version_has_them() -> None:
    async def go(reports: bool) -> Any:
        async with OllamaClient(
            URL, timeout=5, transport=FakeServer("ollama", reports_reuse=reports)
        ) as c:
            await c.chat(chat(1))
            return (await c.chat(chat(1))).report.reused

    assert asyncio.run(go(True)) == usage_of(chat(1)) - 4  # all but the generation prompt
    assert asyncio.run(go(False)) is None


def test_ollama_native_answer_counts_cached_within_prompt_eval_count() -> None:
    native = {"done": True, "prompt_eval_count": 900, "prompt_eval_cached_count": 640}
    report = read_report(native)
    assert (report.prompt_tokens, report.reused, report.processed) == (900, 640, 260)
    older = read_report({"done": True, "prompt_eval_count": 900})
    assert (older.prompt_tokens, older.reused) == (900, None)


def test_fake_lmstudio_window_is_the_loaded_instance_and_reuse_is_never_reported() -> None:
    async def go(window: int | None) -> tuple[int | None, Any]:
        fake = FakeServer("lmstudio", window=window)
        async with LmStudioClient(URL, timeout=5, model=MODEL, transport=fake) as c:
            await c.chat(chat(1))
            return await c.context_window(), (await c.chat(chat(1))).report.reused

    assert asyncio.run(go(16384)) == (16384, None)
    assert asyncio.run(go(None)) == (None, None)


def test_open_backend_picks_each_kind_s_client() -> None:
    s = Settings.load(backend_window=4096)
    found = {
        kind: type(open_backend(kind, URL, s))  # type: ignore[arg-type]
        for kind in ("sglang", "ollama", "lmstudio", "tabbyapi", "openai-compatible")
    }
    assert found == {
        "sglang": SglangClient,
        "ollama": OllamaClient,
        "lmstudio": LmStudioClient,
        "tabbyapi": OpenAICompatClient,
        "openai-compatible": OpenAICompatClient,
    }
    generic = open_backend("openai-compatible", URL, s)
    assert asyncio.run(generic.context_window()) == 4096
    asyncio.run(generic.aclose())


def _layout_and_count(kind: Any, body: dict[str, Any], turns: int = 3) -> list[tuple[int, int]]:
    """(estimated length, the fake's count) for the same body sent ``turns`` times."""

    async def go() -> list[tuple[int, int]]:
        fake = FakeServer(kind)
        backend = open_backend(kind, URL, Settings.load(), transport=fake)
        layouts = token_layouts(backend)
        out = []
        for _ in range(turns):
            layout = await layouts.layout(body)
            await backend.chat(body)
            out.append((len(layout.tokens), usage_of(body)))
        await backend.aclose()
        return out

    return asyncio.run(go())


def test_fake_generic_estimate_errs_high_and_calibrates_to_within_its_margin() -> None:
    body = chat(3)
    rounds = _layout_and_count("openai-compatible", body)
    assert all(estimated >= counted for estimated, counted in rounds)
    calibrated, counted = rounds[-1]
    # Scaled to what the server counted, plus the margin and a few tokens of rounding.
    assert calibrated <= counted * (1 + MARGIN) + 2 * len(body["messages"]) + 2


def test_fake_sglang_estimate_counts_contents_with_its_tokenizer() -> None:
    body = chat(3)
    rounds = _layout_and_count("sglang", body)
    assert all(estimated >= counted for estimated, counted in rounds)


def test_stand_in_tokens_are_shared_exactly_as_far_as_whole_messages() -> None:
    async def go() -> tuple[TokenLayout, TokenLayout, TokenLayout]:
        layouts = EstimatedLayouts()
        a = await layouts.layout(chat(2))
        longer = chat(3)
        b = await layouts.layout(longer)
        changed = {**longer, "messages": [dict(m) for m in longer["messages"]]}
        changed["messages"][3]["content"] += " (edited)"
        return a, b, await layouts.layout(changed)

    a, b, c = asyncio.run(go())
    assert a.method == b.method == "estimated"
    shared = a.spans[-2].end  # chat(2)'s messages before its last question
    assert a.tokens[:shared] == b.tokens[:shared]
    assert a.tokens[shared] != b.tokens[shared]
    edited = b.spans[3].start
    assert c.tokens[:edited] == b.tokens[:edited]
    assert c.tokens[edited] != b.tokens[edited]
    assert [s.end - s.start > 0 for s in b.spans] == [True] * len(b.spans)
