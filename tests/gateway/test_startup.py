"""Issue 31, situation 2: the gateway never hurts the server and never hangs at start.

It starts before its backend and waits for it, saying so (a request meanwhile gets a
503 naming the backend); a signal stops it at once; the cache experiment runs only
where nothing is at stake (a slot that served nothing since the server started) or
nothing is known (no stored result for this server), never into a busy slot; and the
checkpoint source follows a server restarted with other flags. Real llama-servers,
``sakur4 gateway`` as a user runs it; the one fake is a socket that accepts and never
answers (a backend hung at start-up), named so.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from gateway_process import GatewayProcess, SilentBackend, wait_for
from sakur4.backends.launcher import RUN_TO_CAP, LlamaServer, ServerFlags, free_port

HELLO = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi."}]


def chat(url: str, session: str = "start", messages: list[Any] = HELLO) -> httpx.Response:
    return httpx.post(
        url + "/v1/chat/completions",
        json={"messages": messages, "max_tokens": 1},
        headers={"X-Sakur4-Session": session},
        timeout=300,
    )


@pytest.mark.backend
def test_gateway_starts_before_its_backend_waits_and_stops_on_sigterm(
    own_backend: LlamaServer, gateway_process: Callable[..., GatewayProcess]
) -> None:
    # Was: `Application startup failed`, exit 3, when the server was not up yet.
    server = own_backend
    server.port = free_port()
    gw = gateway_process(server.url)
    wait_for("the gateway answers with its backend down", gw.answers, 60)
    r = chat(gw.url)
    assert r.status_code == 503, r.text
    message = r.json()["error"]["message"]
    assert server.url in message
    assert "waiting for it" in message
    wait_for("the gateway says it waits", lambda: "waiting for it" in gw.said, 30)

    server.start()
    wait_for(
        "the gateway links to the backend",
        lambda: httpx.get(gw.url + "/health", timeout=30).status_code == 200,
    )
    ok = chat(gw.url)
    assert ok.status_code == 200, ok.text
    # One line per turn on its terminal: session, tokens of window, verdict, reuse, time.
    wait_for("the turn's line", lambda: "start turn 1: " in gw.said, 30)
    line = next(x for x in gw.said.splitlines() if "start turn 1: " in x)
    assert "of 4,096 tokens" in line
    assert "reused" in line
    assert line.rstrip().endswith(" s")
    assert f"backend {server.url} ready" in gw.said
    assert gw.stop() < 5.0
    assert "Traceback" not in gw.said


def test_sigterm_stops_a_gateway_whose_backend_never_answers_fake_backend(
    gateway_process: Callable[..., GatewayProcess],
) -> None:
    # Was: the probe ran inside the start-up, which a signal did not interrupt (a
    # `timeout 60` found the gateway still running at 74 s).
    silent = SilentBackend()
    try:
        gw = gateway_process(silent.url)
        wait_for("the gateway answers while its backend is silent", gw.answers, 60)
        time.sleep(1.0)  # the link is now waiting on the silent backend
        took = gw.stop()
        assert took < 5.0, f"SIGTERM took {took:.1f} s"
        assert gw.proc.returncode is not None
        assert "Traceback" not in gw.said
    finally:
        silent.close()


def _completions(gw: Any) -> int:
    return sum(1 for path in gw.transport.paths if path == "/completion")


@pytest.mark.backend
def test_no_cache_experiment_on_a_slot_in_use(own_backend: LlamaServer, gateways: Any) -> None:
    # Was: every gateway start ran the cache experiment on slot 0 of the live server
    # (it once crashed llama-server right after a harness turn).
    server = own_backend
    server.start()
    first = gateways.start(server.url)  # a server that served nothing: measured
    assert _completions(first) > 0
    assert httpx.get(first.url + "/health", timeout=60).json()["checkpoint_source"] == (
        "checkpoint-ring"
    )
    assert chat(first.url).status_code == 200  # the slot now holds a harness's prompt
    gateways.stop(first)

    second = gateways.start(server.url)  # same store, same server: the stored result
    assert _completions(second) == 0
    assert httpx.get(second.url + "/health", timeout=60).json()["checkpoint_source"] == (
        "checkpoint-ring"
    )
    gateways.stop(second)

    # A new store (nothing known) while the slot is busy: not measured, and said so.
    stop = threading.Event()
    errors: list[BaseException] = []

    def hold_the_slot() -> None:
        body = {"messages": HELLO, "max_tokens": 3000, **RUN_TO_CAP, "stream": True}
        try:
            with httpx.stream(
                "POST", server.url + "/v1/chat/completions", json=body, timeout=900
            ) as r:
                for _ in r.iter_lines():
                    if stop.is_set():
                        return  # hanging up ends the request on the server
        except httpx.HTTPError as e:
            errors.append(e)

    busy = threading.Thread(target=hold_the_slot, daemon=True)
    busy.start()
    try:
        wait_for(
            "the slot is busy",
            lambda: any(s["is_processing"] for s in httpx.get(server.url + "/slots").json()),
            120,
        )
        fresh = gateways.start(server.url, store_name="other.db")
        assert _completions(fresh) == 0
        assert fresh.transport.sent == []  # not even a tiny chat
        health = httpx.get(fresh.url + "/health", timeout=60).json()
        assert health["checkpoint_source"] == "uncertain"
        assert any(s["is_processing"] for s in httpx.get(server.url + "/slots").json())
    finally:
        stop.set()
        busy.join(120)
    assert errors == []


@pytest.mark.backend
def test_checkpoint_source_follows_a_restart_with_other_flags(
    own_backend: LlamaServer, gateways: Any
) -> None:
    # Was: only the window was read again; a server restarted with --swa-full kept
    # being planned for as a checkpoint ring. Here nothing fails in between: the
    # restart shows only as a turn that reused nothing of what was predicted.
    server = own_backend
    server.start()
    gw = gateways.start(server.url)
    ident = httpx.get(gw.url + "/sakur4/gateway", timeout=30).json()
    assert ident["checkpoint_source"] == "checkpoint-ring"
    messages = [
        {"role": "system", "content": "You are terse. " + "Context words. " * 150},
        {"role": "user", "content": "Hi."},
    ]
    for n in range(2):
        assert chat(gw.url, "restart", messages).status_code == 200
        messages += [
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": f"More {n}."},
        ]
    server.stop()
    server.flags = ServerFlags(ctx=4096, swa_full=True)
    server.start()
    for n in range(2):
        assert chat(gw.url, "restart", messages).status_code == 200
        messages += [
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": f"Again {n}."},
        ]
    ident = httpx.get(gw.url + "/sakur4/gateway", timeout=30).json()
    assert ident["checkpoint_source"] == "exact-prefix"
