"""The per-model piece cache: a prompt tokenized as ids alone, its pieces from the cache
or asked for by id, gives the same layout as one tokenized with pieces; a wrong piece
and too many unknown ids send the layout to the pieces call; another model's pieces are
never used.

The real server shows the equality and what ``/tokenize`` answers for ids; the faults
are staged with a fake backend (an injected transport: a character tokenizer and a tag
template) whose model can be swapped."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from fixtures_llama import REAL_SETTINGS, locate_backend
from sakur4.backends.launcher import LlamaServer, ServerFlags
from sakur4.backends.layout import TokenLayout, TokenLayouts
from sakur4.backends.layout import pieces as pieces_module
from sakur4.backends.layout.pieces import PieceCache
from sakur4.backends.llamacpp import LlamaCppClient


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def fetch_any(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let a short test prompt fetch unknown pieces (a cost rule: one fetch per 1,600
    tokens, which these prompts do not reach)."""
    monkeypatch.setattr(pieces_module, "TOKENS_PER_FETCH", 1)


# -- the real server -------------------------------------------------------------------


def _chat(tag: str, topic: str, turns: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": f"[{tag}] {topic}"}]
    for i in range(turns):
        msgs.append({"role": "user", "content": f"{topic} {i}: what does part_{i} do? 日本語"})
        msgs.append({"role": "assistant", "content": f"It computes {topic} {i * 7} 🎉"})
    msgs.append({"role": "user", "content": "Summarise."})
    return msgs


@pytest.mark.backend
@pytest.mark.parametrize("server", ["llama_ring", "llama_gemma"])
def test_layouts_from_known_pieces_are_the_layouts_from_the_pieces_call(
    server: str, request: pytest.FixtureRequest, fetch_any: None
) -> None:
    """A first sight laid out from ids alone — by a TokenLayouts that has seen another
    conversation (its pieces known, the new tag's asked for) or by a fresh one (every
    distinct id asked for) — is the layout of the pieces call, field for field, and so
    is the turn built on it."""
    url = request.getfixturevalue(server).url
    other = _chat(secrets.token_hex(3), "Weather in Oslo", 4)
    target = _chat(secrets.token_hex(3), "Totals of the ledger", 5)
    grown = [
        *target,
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "And the ledger's 𝔘 column?"},
    ]

    async def go() -> Any:
        async with LlamaCppClient(url, timeout=120) as c:
            warm, fresh = TokenLayouts(c), TokenLayouts(c)
            reference = TokenLayouts(c, pieces_by_id=False)
            await warm.layout({"messages": other})
            before = Counter(warm.piece_calls)
            got = [
                await layouts.layout({"messages": m})
                for layouts in (warm, fresh, reference)
                for m in (target, grown)
            ]
            calls = (warm.piece_calls - before, fresh.piece_calls, reference.piece_calls)
            return got, calls

    got, (warm, fresh, reference) = run(go())
    assert warm["known pieces"] == 1, warm  # the first sight (a turn tokenizes with pieces)
    assert warm["tokenize with pieces"] == 0, warm
    assert warm["pieces of ids"] == 1  # the new tag's tokens, at least
    assert fresh["known pieces"] == 1, fresh
    assert fresh["tokenize with pieces"] == 0, fresh
    assert reference["tokenize with pieces"] == 1
    assert reference["known pieces"] == 0
    assert [g.method for g in got] == ["full", "incremental"] * 3
    for mine, theirs in ((got[0], got[4]), (got[1], got[5]), (got[2], got[4]), (got[3], got[5])):
        assert _same(mine, theirs)


@pytest.mark.backend
def test_tokenize_of_ids_answers_each_piece_as_for_the_text(llama_ring: LlamaServer) -> None:
    """``/tokenize`` with a list of ids as its content answers exactly the pieces the
    text's tokens have, byte tokens (part of a UTF-8 character) as their bytes."""
    text = "def total(): 𝔘𐍈 日本語 <bos> done"

    async def go() -> Any:
        async with LlamaCppClient(llama_ring.url, timeout=120) as c:
            pieces = await c.tokenize_pieces(text, add_special=False)
            return pieces, await c.pieces_of([t for t, _ in pieces])

    pieces, by_id = run(go())
    assert any(not _utf8(raw) for _, raw in pieces), "no byte token: pick rarer characters"
    assert by_id == pieces


@pytest.mark.backend
def test_a_backend_restarted_with_another_model_file_starts_the_pieces_afresh(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The same server restarted on the same port with another model file (here the
    same weights under another path: the identity is the file): none of the first
    run's pieces is kept, and the layout is the pieces call's."""
    binary, model = locate_backend(
        REAL_SETTINGS, require=bool(request.config.getoption("--require-backend"))
    )
    other = tmp_path / "other.gguf"
    other.symlink_to(model)
    server = LlamaServer(binary, model, ServerFlags(ctx=4096), log_path=tmp_path / "ls.log")
    first = {"messages": _chat(secrets.token_hex(3), "Weather in Oslo", 3)}
    second = {"messages": _chat(secrets.token_hex(3), "Totals of the ledger", 3)}

    async def layout(layouts: TokenLayouts, body: dict[str, Any]) -> Any:
        before = Counter(layouts.piece_calls)
        got = await layouts.layout(body)
        return got, layouts.piece_calls - before, len(layouts.tokenizer.pieces)

    async def go() -> Any:
        async with LlamaCppClient(server.url, timeout=120) as c:
            layouts = TokenLayouts(c)
            await layout(layouts, first)
            known = len(layouts.tokenizer.pieces)
            server.stop()
            server.model = other
            server.start()
            got, calls, held = await layout(layouts, second)
            ids = await c.tokenize(got.prompt, add_special=False)
            reference = await TokenLayouts(c, pieces_by_id=False).layout(second)
            return known, got, calls, held, ids, layouts.tokenizer.pieces.identity, reference

    try:
        server.start()
        known, got, calls, held, ids, identity, reference = run(go())
    finally:
        server.stop()
    assert calls["pieces of ids"] == 1, calls
    assert calls["proof failed"] == 0, calls
    assert known > 0
    assert held == len(set(ids))  # the new prompt's ids alone: none of the first run's
    assert identity is not None
    assert identity[0] == str(other)
    assert _same(got, reference)


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# -- a fake backend --------------------------------------------------------------------


class FakeServer:
    """A character tokenizer (ASCII: id ord+shift; other text: one byte token a UTF-8
    byte, id 1000+byte), BOS id 1, and a template rendering ``<role>content</role>``."""

    def __init__(self) -> None:
        self.model = "/models/a.gguf"
        self.shift = 10
        self.calls: Counter[str] = Counter()
        self.asked: list[int] = []  # ids whose pieces were asked for by id
        self.ids_as_text = False  # a server that reads a list of ids as the text "[…]"

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def _ids(self, text: str) -> list[int]:
        out: list[int] = []
        for ch in text:
            if ord(ch) < 128:
                out.append(ord(ch) + self.shift)
            else:
                out += [1000 + b for b in ch.encode("utf-8")]
        return out

    def _piece(self, token: int) -> bytes:
        if token == 1:
            return b"<bos>"
        return bytes([token - 1000]) if token >= 1000 else chr(token - self.shift).encode()

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        body = json.loads(request.content) if request.content else {}
        self.calls[path] += 1
        if path == "/props":
            return httpx.Response(200, json={"model_path": self.model, "build_info": "b1"})
        if path == "/apply-template":
            prompt = "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in body["messages"])
            if body.get("add_generation_prompt", True):
                prompt += "<gen>"
            return httpx.Response(200, json={"prompt": prompt})
        if path == "/tokenize":
            content = body["content"]
            if isinstance(content, list) and self.ids_as_text:
                ids = self._ids(json.dumps(content))
            elif isinstance(content, list):
                ids = content
                self.asked += ids
            else:
                ids = ([1] if body.get("add_special") else []) + self._ids(content)
            if not body.get("with_pieces"):
                return httpx.Response(200, json={"tokens": ids})
            out = []
            for t in ids:
                raw = self._piece(t)
                piece: Any = raw.decode() if _utf8(raw) else list(raw)
                out.append({"id": t, "piece": piece})
            return httpx.Response(200, json={"tokens": out})
        return httpx.Response(404, json={"error": {"message": path}})


def _fake_chat(*contents: str) -> dict[str, Any]:
    """System first, then user and assistant in turn (first contents differ between
    the bodies of a test, so no layout is extended from another's prefix)."""
    roles = ["system"] + ["user" if i % 2 else "assistant" for i in range(1, len(contents))]
    return {"messages": [{"role": r, "content": c} for r, c in zip(roles, contents, strict=True)]}


def _same(got: TokenLayout, reference: TokenLayout) -> bool:
    """Equal in every field but the render count (a warm TokenLayouts knows wrappers)."""
    return replace(got, renders=0) == replace(reference, renders=0)


async def _layouts(
    fake: FakeServer, *bodies: dict[str, Any], pieces_by_id: bool = True
) -> tuple[list[Any], TokenLayouts, list[Counter[str]]]:
    """Lay out ``bodies`` in turn with one TokenLayouts; the piece calls each made."""
    async with LlamaCppClient("http://fake.test", timeout=5, transport=fake.transport()) as c:
        layouts = TokenLayouts(c, pieces_by_id=pieces_by_id)
        got, calls = [], []
        for body in bodies:
            before = Counter(layouts.piece_calls)
            got.append(await layouts.layout(body))
            calls.append(layouts.piece_calls - before)
        return got, layouts, calls


async def _fresh(fake: FakeServer, body: dict[str, Any]) -> Any:
    """The reference: the layout from the pieces call."""
    return (await _layouts(fake, body, pieces_by_id=False))[0][0]


def test_a_wrong_piece_fails_the_proof_and_the_pieces_call_mends_it(fetch_any: None) -> None:
    """Two wrong pieces whose lengths still add up (``q`` two bytes, ``z`` none) would
    move the boundary between them: the pieces must spell the prompt byte for byte."""
    fake = FakeServer()
    warm = _fake_chat("other", "qz ab end sys")
    target = _fake_chat("sys", "a q", "z b", "end")

    async def go() -> Any:
        async with LlamaCppClient("http://fake.test", timeout=5, transport=fake.transport()) as c:
            layouts = TokenLayouts(c)
            await layouts.layout(warm)
            q, z = ord("q") + fake.shift, ord("z") + fake.shift
            layouts.tokenizer.pieces.learn([(q, b"qq"), (z, b"")])
            got = await layouts.layout(target)
            return got, layouts.piece_calls, layouts.tokenizer.pieces.pieces([q, z])

    got, calls, mended = run(go())
    assert calls["proof failed"] == 1, calls
    assert calls["tokenize with pieces"] == 1, calls
    assert mended == [b"q", b"z"]
    assert _same(got, run(_fresh(fake, target)))


def test_a_piece_that_is_part_of_a_character_is_asked_for_as_its_bytes(
    fetch_any: None,
) -> None:
    fake = FakeServer()
    target = _fake_chat("sys", "caf\u00e9 ok", "done")
    got, _, calls = run(_layouts(fake, _fake_chat("other", "cafe ok sys done i"), target))
    assert calls[1]["pieces of ids"] == 1, calls
    assert calls[1]["tokenize with pieces"] == 0, calls
    assert sorted(fake.asked[-2:]) == sorted(1000 + b for b in "é".encode())
    assert _same(got[1], run(_fresh(fake, target)))


def test_many_unknown_ids_go_to_the_pieces_call_not_one_call_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One fetch per ``TOKENS_PER_FETCH`` tokens: past that, one pieces call."""
    monkeypatch.setattr(pieces_module, "TOKENS_PER_FETCH", 10)
    fake = FakeServer()
    many = "".join(chr(c) for c in range(33, 127))  # 94 ids, 14 known from the warm body
    target = _fake_chat("xx", many)
    got, _, calls = run(_layouts(fake, _fake_chat("x", "y"), target))
    assert calls[1]["pieces of ids"] == 0, calls
    assert calls[1]["tokenize with pieces"] == 1, calls
    assert calls[1]["too many unknown"] == 1
    assert _same(got[1], run(_fresh(fake, target)))
    # Within the bound (37 tokens: up to 3 unknown; "!" is the one): asked for by id.
    few = _fake_chat("x!", "y")
    got, _, calls = run(_layouts(fake, _fake_chat("x", "y"), few))
    assert calls[1]["pieces of ids"] == 1, calls
    assert calls[1]["tokenize with pieces"] == 0, calls
    assert fake.asked[-1:] == [ord("!") + fake.shift]
    assert _same(got[1], run(_fresh(fake, few)))


def test_another_model_never_gets_the_pieces_of_the_last(fetch_any: None) -> None:
    """The server restarted with another model (other ids for the same text): the
    first model's pieces are dropped before any is used, every piece of the new prompt
    is asked for, and only the new model's are held."""
    fake = FakeServer()
    before, after = _fake_chat("first", "hello there"), _fake_chat("second", "hello again")

    async def go() -> Any:
        async with LlamaCppClient("http://fake.test", timeout=5, transport=fake.transport()) as c:
            layouts = TokenLayouts(c)
            await layouts.layout(before)
            fake.model, fake.shift = "/models/b.gguf", 20
            fake.asked.clear()
            seen = Counter(layouts.piece_calls)
            got = await layouts.layout(after)
            return got, layouts.piece_calls - seen, layouts.tokenizer.pieces

    got, calls, pieces = run(go())
    assert calls["proof failed"] == 0, calls  # the old pieces were not even tried
    prompt = "<system>second</system><user>hello again</user><gen>"
    assert set(fake.asked) == {ord(ch) + 20 for ch in prompt}
    assert pieces.identity == ("/models/b.gguf", "b1")
    assert pieces.unknown([ord("t") + 10]) == {ord("t") + 10}  # model A's "t": gone
    assert _same(got, run(_fresh(fake, after)))


def test_the_cache_never_holds_more_than_its_limit() -> None:
    cache = PieceCache(limit=3)
    cache.learn([(1, b"a"), (2, b"b")])
    cache.learn([(3, b"c"), (4, b"d"), (5, b"e")])
    assert len(cache) == 3
    assert cache.unknown([1, 2, 3]) == set()  # what was known first stays
    cache.learn([(1, b"A")])
    assert cache.pieces([1]) == [b"A"]  # a later answer wins


def test_ids_the_server_did_not_read_as_ids_send_the_layout_to_the_pieces_call(
    fetch_any: None,
) -> None:
    """A server that answers a list of ids with other ids (it read the list as text):
    those pieces are never learned, the turn is not failed, and the pieces call lays
    it out."""
    fake = FakeServer()
    fake.ids_as_text = True
    target = _fake_chat("sys", "a new word: zebra", "done")
    got, layouts, calls = run(_layouts(fake, _fake_chat("other", "a word sys done"), target))
    assert calls[1]["pieces of ids refused"] == 1, calls
    assert calls[1]["too many unknown"] == 0, calls
    assert calls[1]["tokenize with pieces"] == 1, calls
    assert calls[1]["known pieces"] == 0, calls
    assert _same(got[1], run(_fresh(fake, target)))
    assert layouts.tokenizer.pieces.pieces([ord("z") + fake.shift]) == [b"z"]  # the pieces call
