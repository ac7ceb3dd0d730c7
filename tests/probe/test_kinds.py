"""``sakur4 probe`` on the kinds that cannot run here, against fakes of their documented
shapes (tests/fake_kinds.py): the kind named, what is exact and what estimated, what is
verified, and the flag to add. The real llama.cpp and vLLM probes are in test_probe.py
and tests/backends/test_vllm.py."""

from __future__ import annotations

import asyncio
from typing import Any

from click.testing import CliRunner

from fake_kinds import MODEL, FakeKind, FakeServer
from sakur4.backends.http import HttpBackend
from sakur4.backends.identify import Identity, identify
from sakur4.probe import ProbeResult, probe
from sakur4.settings import Settings


def probed(fake: FakeServer, **settings: Any) -> ProbeResult:
    return asyncio.run(probe("http://fake:1", Settings.load(**settings), transport=fake))


def test_fake_lmstudio_is_identified_by_its_rest_api() -> None:
    async def go() -> Identity:
        fake = FakeServer("lmstudio", window=16384)
        async with HttpBackend("http://fake:1", timeout=5, transport=fake) as http:
            return await identify(http)

    got = asyncio.run(go())
    assert got == Identity("lmstudio", model=MODEL, n_ctx=16384, n_ctx_train=131072)


def test_fake_sglang_with_cache_report_is_verified_and_any_prefix() -> None:
    r = probed(FakeServer("sglang", reports_reuse=True))
    assert (r.kind, r.reuse_verifiable, r.checkpoint_source, r.n_ctx) == (
        "sglang",
        True,
        "exact-prefix",
        8192,
    )
    assert r.reuse_field == "usage.prompt_tokens_details.cached_tokens"
    assert r.layout.startswith("message contents exact (/v1/tokenize), template estimated")
    assert not r.exact_tokenization
    assert not any("--enable-cache-report" in a for a in r.advice)


def test_fake_sglang_without_cache_report_is_unverifiable_and_names_the_flag() -> None:
    r = probed(FakeServer("sglang", reports_reuse=False))
    assert (r.reuse_verifiable, r.reuse_field, r.checkpoint_source, r.source_class) == (
        False,
        None,
        "none",
        "none",
    )
    assert any("--enable-cache-report" in a for a in r.advice)


def test_fake_ollama_window_read_after_the_probe_loaded_it_and_num_ctx_advised() -> None:
    r = probed(FakeServer("ollama", window=4096))
    assert (r.kind, r.n_ctx, r.reuse_verifiable, r.checkpoint_source) == (
        "ollama",
        4096,
        True,
        "exact-prefix",
    )
    assert "estimated" in r.layout
    assert "no tokenize endpoint" in r.layout
    assert any("OLLAMA_CONTEXT_LENGTH" in a and "num_ctx" in a for a in r.advice)
    roomy = probed(FakeServer("ollama", window=65536))
    assert not any("OLLAMA_CONTEXT_LENGTH" in a for a in roomy.advice)


def test_fake_old_ollama_reports_no_reuse_so_window_first() -> None:
    r = probed(FakeServer("ollama", reports_reuse=False))
    assert (r.reuse_verifiable, r.checkpoint_source, r.source_class) == (False, "none", "none")
    assert any("prompt_eval_cached_count" in a for a in r.advice)


def test_fake_lmstudio_reuse_is_unverifiable_and_an_unloaded_model_asks_for_a_window() -> None:
    r = probed(FakeServer("lmstudio", window=16384))
    assert (r.kind, r.n_ctx, r.reuse_verifiable, r.checkpoint_source) == (
        "lmstudio",
        16384,
        False,
        "none",
    )
    assert any("#778" in a for a in r.advice)
    unloaded = probed(FakeServer("lmstudio", window=None))
    assert unloaded.n_ctx is None
    assert any("lms load" in a for a in unloaded.advice)


def test_fake_generic_server_is_estimated_unverifiable_and_takes_the_window_setting() -> None:
    r = probed(FakeServer("openai-compatible"))
    assert (r.kind, r.n_ctx, r.reuse_verifiable, r.checkpoint_source) == (
        "openai-compatible",
        None,
        False,
        "none",
    )
    assert any("SAKUR4_BACKEND_WINDOW" in a for a in r.advice)
    assert probed(FakeServer("openai-compatible"), backend_window=16000).n_ctx == 16000


def test_fake_kinds_probe_line_says_exact_estimated_and_verified() -> None:
    from sakur4.cli.probe import _show

    kinds: list[FakeKind] = ["sglang", "ollama", "lmstudio", "openai-compatible"]
    for kind in kinds:
        result = probed(FakeServer(kind))
        out = CliRunner().invoke(_click_show(_show), [], obj=result).output
        assert f": {kind}" in out.splitlines()[0]
        assert "  layout          " in out
        assert ("yes, verified" in out) == result.reuse_verifiable
        assert ("receipts say unverifiable" in out) == (not result.reuse_verifiable)


def _click_show(show: Any) -> Any:
    import click

    @click.command()
    @click.pass_obj
    def cmd(result: ProbeResult) -> None:
        show(result)

    return cmd
