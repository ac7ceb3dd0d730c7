"""Every way a backend can fail becomes one BackendError naming the backend and what
failed, on the right side of unavailable/refused. Faults are staged with an
injected transport (no patching); the real-socket cases use real sockets."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest

from sakur4.backends.launcher import free_port
from sakur4.backends.llamacpp import LlamaCppClient
from sakur4.errors import BackendRefused, BackendUnavailable, ContextOverflow, SettingsError
from sakur4.settings import Settings

URL = "http://backend.test:8080"
Handler = Callable[[httpx.Request], httpx.Response]


def client(handler: Handler, timeout: float = 0.5) -> LlamaCppClient:
    return LlamaCppClient(URL, timeout=timeout, transport=httpx.MockTransport(handler))


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _call(c: LlamaCppClient, what: str) -> Any:
    async with c:
        if what == "completion":
            return await c.completion({"prompt": "hi", "n_predict": 1})
        if what == "tokenize":
            return await c.tokenize("hi")
        if what == "chat":
            return await c.chat({"messages": [{"role": "user", "content": "hi"}]})
        if what == "slot":
            return await c.slot_action(0, "save", "x.bin")
        raise AssertionError(what)


def error_body(code: int, kind: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "type": kind, "message": message}}


def test_connection_refused_is_unavailable_and_names_the_backend() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    with pytest.raises(BackendUnavailable) as e:
        run(_call(client(refuse), "completion"))
    assert URL in str(e.value)
    assert "POST /completion" in str(e.value)
    assert "cannot connect" in str(e.value)


def test_a_real_closed_port_is_unavailable() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nobody listens there
    with pytest.raises(BackendUnavailable, match=r"cannot connect") as e:
        run(_call(LlamaCppClient(url, timeout=2), "tokenize"))
    assert url in str(e.value)


def test_501_not_supported_is_a_refusal() -> None:
    body = error_body(501, "not_supported_error", "This server does not support slots action.")

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(501, json=body)

    with pytest.raises(BackendRefused) as e:
        run(_call(client(answer), "slot"))
    assert not isinstance(e.value, BackendUnavailable)
    assert e.value.status == 501
    assert "not_supported_error" in str(e.value)
    assert "POST /slots/0" in str(e.value)


@pytest.mark.parametrize("status", [500, 502, 503])
def test_5xx_is_unavailable(status: int) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, text="upstream exploded")

    with pytest.raises(BackendUnavailable) as e:
        run(_call(client(answer), "chat"))
    assert e.value.status == status
    assert f"HTTP {status}" in str(e.value)
    assert "upstream exploded" in str(e.value)


def test_context_overflow_is_a_refusal_of_its_own() -> None:
    body = error_body(400, "exceed_context_size_error", "request (8300 tokens) exceeds ...")

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json=body)

    with pytest.raises(ContextOverflow) as e:
        run(_call(client(answer), "completion"))
    assert isinstance(e.value, BackendRefused)
    assert "8300 tokens" in str(e.value)


def test_other_4xx_is_a_refusal() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json=error_body(400, "invalid_request_error", "bad field"))

    with pytest.raises(BackendRefused) as e:
        run(_call(client(answer), "chat"))
    assert not isinstance(e.value, ContextOverflow)
    assert "bad field" in str(e.value)


def test_timeout_is_unavailable_and_says_which_setting() -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    with pytest.raises(BackendUnavailable, match=r"timed out after 0.5s") as e:
        run(_call(client(slow), "completion"))
    assert "SAKUR4_BACKEND_TIMEOUT" in str(e.value)


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A real socket that accepts connections and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


def test_a_real_silent_server_times_out_after_the_configured_timeout(silent_server: str) -> None:
    s = Settings.load(backend=silent_server, backend_timeout=0.3)
    c = LlamaCppClient.from_settings(s)
    assert c.timeout == 0.3
    with pytest.raises(BackendUnavailable, match=r"timed out after 0.3s"):
        run(_call(c, "tokenize"))


def test_from_settings_without_a_url_is_a_settings_error() -> None:
    with pytest.raises(SettingsError, match="SAKUR4_BACKEND"):
        LlamaCppClient.from_settings(Settings.load())


@pytest.mark.parametrize(
    "text",
    ['{"tokens": [1, 2,', "<html>502 Bad Gateway</html>", ""],
    ids=["truncated", "html", "empty"],
)
def test_malformed_or_truncated_json_is_unavailable(text: str) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=text)

    with pytest.raises(BackendUnavailable, match=r"POST /tokenize sent malformed JSON"):
        run(_call(client(answer), "tokenize"))


def test_json_of_the_wrong_shape_is_unavailable() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"content": "not tokens"})

    with pytest.raises(BackendUnavailable, match=r"answered without 'tokens'"):
        run(_call(client(answer), "tokenize"))


@pytest.mark.parametrize(
    "entry", [{"piece": "hi"}, "hi", [104, 105], {"id": "x", "piece": "hi"}, {"id": 1, "piece": 7}]
)
def test_a_bad_token_entry_with_pieces_is_unavailable_and_shown(entry: Any) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"tokens": [{"id": 5, "piece": [104]}, entry]})

    async def go() -> Any:
        async with client(answer) as c:
            return await c.tokenize_pieces("hi")

    with pytest.raises(BackendUnavailable, match=r"POST /tokenize: bad token entry"):
        run(go())


def test_token_pieces_come_back_as_bytes_from_text_or_byte_lists() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        pieces = [{"id": 5, "piece": "é"}, {"id": 6, "piece": [0xF0, 0x9F]}, {"id": 7}]
        return httpx.Response(200, json={"tokens": pieces})

    async def go() -> Any:
        async with client(answer) as c:
            return await c.tokenize_pieces("hi")

    assert run(go()) == [(5, "é".encode()), (6, b"\xf0\x9f"), (7, b"")]


# -- streaming -----------------------------------------------------------------------


def sse(*events: dict[str, Any] | str) -> bytes:
    out = []
    for e in events:
        out.append(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n")
    return "".join(out).encode()


CHUNK = {"choices": [{"index": 0, "delta": {"content": "he"}}], "object": "chat.completion.chunk"}
USAGE = {
    "choices": [],
    "usage": {"prompt_tokens": 25, "prompt_tokens_details": {"cached_tokens": 20}},
    "timings": {"cache_n": 20, "prompt_n": 5, "prompt_ms": 12.5},
}


async def _stream(c: LlamaCppClient, body: dict[str, Any]) -> tuple[list[str], Any]:
    async with c, c.chat_stream(body) as stream:
        seen = [chunk.data async for chunk in stream]
        return seen, stream.report


def test_stream_passes_every_field_through_and_reads_the_usage_chunk() -> None:
    sent: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, content=sse(CHUNK, USAGE, "[DONE]"))

    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.2,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "stream_options": {"continuous_usage_stats": False},
    }
    seen, report = run(_stream(client(answer), body))
    assert sent[0]["temperature"] == 0.2
    assert sent[0]["tools"] == body["tools"]
    assert sent[0]["stream"] is True
    assert sent[0]["stream_options"] == {"continuous_usage_stats": False, "include_usage": True}
    assert seen == [json.dumps(CHUNK), json.dumps(USAGE)]  # the events, unchanged
    assert (report.reused, report.processed, report.prompt_ms) == (20, 5, 12.5)


def test_stream_that_ends_without_done_is_a_cut_stream() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=sse(CHUNK, CHUNK))

    with pytest.raises(BackendUnavailable, match=r"ended after 2 events without \[DONE\]") as e:
        run(_stream(client(answer), {"messages": []}))
    assert URL in str(e.value)


class _CutBody(httpx.AsyncByteStream):
    """A response body that stops mid-way with the connection closing under it."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield sse(CHUNK)
        yield b'data: {"choices": [{"delta": {"cont'
        raise httpx.RemoteProtocolError("peer closed connection without sending complete body")


def test_stream_cut_mid_event_is_unavailable() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=_CutBody())

    with pytest.raises(BackendUnavailable, match=r"after 1 events failed: the connection closed"):
        run(_stream(client(answer), {"messages": []}))


def test_error_event_mid_stream_is_mapped() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        err = error_body(500, "server_error", "decode failed")
        return httpx.Response(200, content=sse(CHUNK, err, "[DONE]"))

    with pytest.raises(BackendUnavailable, match=r"mid-stream after 1 events.*decode failed"):
        run(_stream(client(answer), {"messages": []}))


def test_malformed_event_is_unavailable() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=sse("{not json", "[DONE]"))

    with pytest.raises(BackendUnavailable, match=r"malformed JSON"):
        run(_stream(client(answer), {"messages": []}))


def test_stream_refused_before_it_starts() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json=error_body(400, "exceed_context_size_error", "too long"))

    with pytest.raises(ContextOverflow, match="too long"):
        run(_stream(client(answer), {"messages": []}))
