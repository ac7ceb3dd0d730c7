"""A streamed answer whose server is slow to open starts at once and is kept alive.

llama-server sends its response headers only after the prefill: minutes on a CPU for a
harness's first prompt, and harnesses hang up on a silent connection (Claude Code's
first-byte watchdog, OpenCode's header timeout). Past the gateway's grace the answer
starts (200, the X-Sakur4 headers) with the wire's keep-alive until the server opens.
The one fake is the slow server: the gateway's transport delays the turn's call to
the real llama-server (``FaultyTransport.delays``); the grace and the keep-alive
interval are shortened here. Clients are the real ``openai`` and ``anthropic`` SDKs.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import openai
import pytest

import anthropic
from gateway_receipts import receipts_of
from sakur4.backends.launcher import LlamaServer
from sakur4.gateway import serving
from tracebacks import Logged

CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
HELLO = [{"role": "user", "content": "Say ok."}]
DELAY = 2.0  # the slow server's wait before its headers; the grace is 0.3 s
OPENAI_KEEPALIVE = ": keep-alive\n\n"
PING = 'event: ping\ndata: {"type": "ping"}\n\n'


@pytest.fixture(autouse=True)
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serving, "OPEN_GRACE", 0.3)
    monkeypatch.setattr(serving, "KEEPALIVE_EVERY", 0.3)


@pytest.fixture
def translating(llama_ring: LlamaServer, start_gateway: Any) -> Any:
    """A gateway whose Anthropic turns go to chat completions (where faults are staged)."""
    return start_gateway(llama_ring.url, hide_messages_api=True)


def _body(path: str, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": HELLO, "max_tokens": 4, "stream": True, **extra}
    return {"model": "local", **body} if path == MESSAGES else body


def _raw(gw: Any, path: str, session: str, **extra: Any) -> tuple[int, str]:
    """The status and every byte of a streamed answer, as the wire carried them."""
    headers = {"X-Sakur4-Session": session, "x-api-key": "unused"}
    with httpx.stream(
        "POST", gw.url + path, json=_body(path, **extra), headers=headers, timeout=300
    ) as r:
        return r.status_code, r.read().decode()


def _openai(gw: Any, session: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=gw.url + "/v1",
        api_key="unused",
        max_retries=0,
        timeout=300,
        default_headers={"X-Sakur4-Session": session},
    )


def _anthropic(gw: Any, session: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=gw.url,
        api_key="unused",
        max_retries=0,
        timeout=300,
        default_headers={"X-Sakur4-Session": session},
    )


@pytest.mark.backend
def test_openai_sdk_gets_keepalives_then_the_answer_from_a_fake_slow_server(
    llama_ring: LlamaServer, start_gateway: Any
) -> None:
    gw = start_gateway(llama_ring.url)
    gw.transport.delays.append(DELAY)
    status, text = _raw(gw, CHAT, "slow-openai")
    assert status == 200
    waited = text[: text.index("data:")]
    assert waited.count(OPENAI_KEEPALIVE) >= 3, text[:400]
    assert waited == OPENAI_KEEPALIVE * waited.count(OPENAI_KEEPALIVE)
    assert text.endswith("data: [DONE]\n\n")
    gw.transport.delays.append(DELAY)
    with (
        _openai(gw, "slow-openai") as client,
        client.chat.completions.create(
            model="local",
            messages=HELLO,
            max_tokens=4,
            stream=True,  # type: ignore[arg-type]
        ) as stream,
    ):
        chunks = list(stream)
    # The SDK read the answer to its end; its text may be empty (the packaged model can
    # stop at once under ChatML), so the end is judged by the finish reason.
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert reasons[-1] in ("stop", "length"), reasons
    assert gw.transport.delayed == 2
    receipts = receipts_of(gw, "slow-openai")
    assert [bool(r.detail.get("failed")) for r in receipts] == [False, False]


@pytest.mark.backend
@pytest.mark.parametrize("upstream", ["messages", "chat"])
def test_anthropic_sdk_gets_pings_then_the_message_from_a_fake_slow_server(
    llama_ring: LlamaServer, start_gateway: Any, upstream: str
) -> None:
    gw = start_gateway(llama_ring.url, hide_messages_api=upstream == "chat")
    session = f"slow-anthropic-{upstream}"
    gw.transport.delays.append(DELAY)
    status, text = _raw(gw, MESSAGES, session)
    assert status == 200
    waited = text[: text.index("event: message_start")]
    assert waited.count(PING) >= 3, text[:400]
    assert waited == PING * waited.count(PING)
    assert text.rstrip().endswith('"message_stop"}')
    gw.transport.delays.append(DELAY)
    with (
        _anthropic(gw, session) as client,
        client.messages.stream(model="local", max_tokens=4, messages=HELLO) as stream,  # type: ignore[arg-type]
    ):
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start"
    assert kinds[-1] == "message_stop"
    # The text may be empty (the packaged model can stop at once), so the end is judged
    # by the stop reason and the blocks' kinds.
    assert final.stop_reason in ("end_turn", "max_tokens", "stop_sequence"), final
    assert all(block.type == "text" for block in final.content)
    assert gw.transport.delayed == 2
    receipts = receipts_of(gw, session)
    assert [r.detail["upstream"] for r in receipts] == [upstream, upstream]
    assert not any(r.detail.get("failed") for r in receipts)


@pytest.mark.backend
@pytest.mark.parametrize("path", [CHAT, MESSAGES])
def test_a_fake_server_silent_after_its_headers_is_kept_alive(translating: Any, path: str) -> None:
    # What llama-server does: its headers at once, then nothing until the prefill is done.
    gw = translating
    gw.transport.body_delays.append(DELAY)
    status, text = _raw(gw, path, f"silent-{path.rsplit('/', 1)[-1]}")
    assert status == 200
    keepalive = OPENAI_KEEPALIVE if path == CHAT else PING
    assert text.count(keepalive) >= 3, text[:400]
    assert text.rstrip().endswith("data: [DONE]" if path == CHAT else '"message_stop"}')


@pytest.mark.backend
@pytest.mark.parametrize("path", [CHAT, MESSAGES])
def test_a_fake_slow_server_failing_after_the_grace_ends_the_stream_with_an_error_event(
    translating: Any, path: str, logged: Logged
) -> None:
    gw = translating
    session = f"slow-fails-{path.rsplit('/', 1)[-1]}"
    gw.transport.delays.append(DELAY)
    gw.transport.faults.append("500")
    arrived = gw.served.arrived + 1
    status, text = _raw(gw, path, session)
    gw.served.wait(arrived)
    assert status == 200
    events = [e for e in text.split("\n\n") if e]
    keepalive = OPENAI_KEEPALIVE if path == CHAT else PING
    assert events[:-1] == [keepalive.rstrip("\n")] * (len(events) - 1), text[:400]
    assert len(events) >= 4
    last = events[-1]
    assert "HTTP 500" in last
    assert last.startswith('data: {"error"' if path == CHAT else "event: error\n")
    # The SDKs raise it as an API error (nothing half-parsed), the next turn is served.
    gw.transport.delays.append(DELAY)
    gw.transport.faults.append("500")
    if path == CHAT:
        with (
            _openai(gw, session) as oa,
            pytest.raises(openai.APIError, match="HTTP 500"),
            oa.chat.completions.create(
                model="local",
                messages=HELLO,  # type: ignore[arg-type]
                max_tokens=4,
                stream=True,
            ) as s,
        ):
            list(s)
    else:
        with (
            _anthropic(gw, session) as an,
            pytest.raises(anthropic.APIStatusError, match="HTTP 500"),
            an.messages.stream(model="local", max_tokens=4, messages=HELLO) as s,  # type: ignore[arg-type]
        ):
            s.get_final_message()
    assert _raw(gw, path, session)[0] == 200
    receipts = receipts_of(gw, session)
    assert [bool(r.detail.get("failed")) for r in receipts] == [True, True, False]
    assert not logged.records, [r.getMessage() for r in logged.records]


@pytest.mark.backend
@pytest.mark.parametrize("path", [CHAT, MESSAGES])
def test_a_client_gone_during_keepalive_of_a_fake_slow_server_frees_the_session(
    translating: Any, path: str, logged: Logged
) -> None:
    gw = translating
    session = f"slow-gone-{path.rsplit('/', 1)[-1]}"
    gw.transport.delays.append(60.0)  # the hung-up turn would hold the session this long
    headers = {"X-Sakur4-Session": session, "x-api-key": "unused"}
    with httpx.stream("POST", gw.url + path, json=_body(path), headers=headers, timeout=300) as r:
        first = next(r.iter_text())
    assert first in (OPENAI_KEEPALIVE, PING)  # hung up while the server was "prefilling"
    started = time.monotonic()
    assert _raw(gw, path, session)[0] == 200
    assert time.monotonic() - started < 30, "the next turn waited for the abandoned one"
    assert gw.transport.cancelled == 1  # the abandoned call was cancelled
    assert gw.transport.delayed == 0
    receipts = receipts_of(gw, session)
    assert [bool(r.detail.get("failed")) for r in receipts] == [True, False]
    assert not logged.records, [r.getMessage() for r in logged.records]


@pytest.mark.backend
def test_within_the_grace_an_anthropic_streamed_error_keeps_its_http_status(
    translating: Any,
) -> None:
    # The Messages route opened its upstream inside the stream: an error that came at
    # once was an `error` event after a 200. It is now the status, as Anthropic's API
    # answers (the OpenAI route's: test_stuck_session, test_bad_input's crash test).
    translating.transport.faults.append("500")
    with (
        _anthropic(translating, "fast-fails") as an,
        pytest.raises(anthropic.APIStatusError) as caught,
        an.messages.stream(model="local", max_tokens=4, messages=HELLO) as s,  # type: ignore[arg-type]
    ):
        s.get_final_message()
    assert caught.value.status_code == 503
    assert "HTTP 500" in str(caught.value)
