"""The gateway in front of a real router (vLLM's ``vllm-router``) in front of two real
llama-server workers (issue 39 item 5; tests/fixtures_router.py starts them).

Which worker served each call is read from the workers' own counters (``/metrics``),
before and after the call, not from the router and not from the gateway: a session is
kept on one worker only if every one of its calls moved one worker's counters, the same
one each time. Each receipt's reuse is then held against that worker's own figure.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from fixtures_router import RoutedWorkers, routed_workers
from gateway_receipts import receipts_of
from sakur4.backends.routing import routing_key
from sakur4.probe import last_stored
from sakur4.store import open_store
from sakur4.store.projects import ensure_project

MODEL = "gemma3"
TURNS = 2  # the second turn shows whether the worker kept the first's prefix


@pytest.fixture(scope="module")
def consistent(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RoutedWorkers]:
    with routed_workers(request, tmp_path_factory.mktemp("router-ch"), "consistent_hash") as rw:
        yield rw


@pytest.fixture(scope="module")
def cache_aware(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RoutedWorkers]:
    with routed_workers(request, tmp_path_factory.mktemp("router-ca"), "cache_aware") as rw:
        yield rw


def spread_sessions(gw: Any, rw: RoutedWorkers, per_worker: int = 2) -> tuple[str, ...]:
    """Session names the consistent hash places ``per_worker`` on each worker. The ring
    hashes the workers' URLs, whose ports change every run, so the names are chosen by
    asking the router where each one's routing key goes (a real deployment spreads by
    numbers; four sessions alone land on one worker one run in eight)."""
    store = open_store(gw.store)
    try:
        project = ensure_project(store, gw.project).id
    finally:
        store.close()
    placed: dict[int, list[str]] = {0: [], 1: []}
    for i in range(64):
        name = f"session-{i}"
        worker = rw.worker_for(routing_key(project, name))
        if len(placed[worker]) < per_worker:
            placed[worker].append(name)
        if all(len(v) == per_worker for v in placed.values()):
            # Interleaved: one worker's, then the other's.
            return tuple(n for pair in zip(placed[0], placed[1], strict=True) for n in pair)
    raise AssertionError(f"64 routing keys did not spread over both workers: {placed}")


def client(gw: Any, session: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=gw.url + "/v1",
        api_key="unused",
        max_retries=0,
        default_headers={"X-Sakur4-Session": session},
    )


def interleaved(
    gw: Any, rw: RoutedWorkers, sessions: tuple[str, ...], turns: int
) -> dict[str, list[list[Any]]]:
    """``turns`` turns of each session, round-robin (one turn of each in turn, every
    turn awaited); per session, per turn, the workers whose counters moved."""
    histories: dict[str, list[dict[str, Any]]] = {
        s: [{"role": "system", "content": f"Session {s}. " + f"You review {s}'s code. " * 40}]
        for s in sessions
    }
    seen: dict[str, list[list[Any]]] = {s: [] for s in sessions}
    clients = {s: client(gw, s) for s in sessions}
    try:
        for t in range(turns):
            for s in sessions:
                histories[s].append(
                    {"role": "user", "content": f"{s} step {t}: " + "explain it. " * 25}
                )
                before = rw.snapshot()
                clients[s].chat.completions.create(
                    model=MODEL,
                    messages=histories[s],  # type: ignore[arg-type]
                    max_tokens=4,
                )
                seen[s].append(rw.served(before))
                histories[s].append({"role": "assistant", "content": f"done {t}."})
    finally:
        for c in clients.values():
            c.close()
    return seen


def assert_each_session_on_one_worker(gw: Any, seen: dict[str, list[list[Any]]]) -> set[int]:
    """Every call served by exactly one worker, each session's by the same one, and each
    receipt's reuse the serving worker's own; returns the workers used."""
    used = set()
    for session, calls in seen.items():
        assert all(len(c) == 1 for c in calls), (session, calls)  # one worker a call
        workers = {c[0].worker for c in calls}
        assert len(workers) == 1, (session, calls)  # 100 % of its calls on one worker
        used |= workers
        found = receipts_of(gw, session)
        assert len(found) == len(calls)
        for receipt, call in zip(found, calls, strict=True):
            # The receipt's figures are the worker's: what it reused and processed.
            assert receipt.server_cached == call[0].cached, (session, receipt.turn)
            assert receipt.server_processed == call[0].processed, (session, receipt.turn)
        # The worker holds the session's prefix: from turn 2 on it is reused.
        assert all((r.server_cached or 0) > 0 for r in found[1:]), session
    return used


def test_router_consistent_hash_keeps_each_session_on_one_worker(
    start_gateway: Any, consistent: RoutedWorkers
) -> None:
    gw = start_gateway(consistent.url)
    sessions = spread_sessions(gw, consistent)
    logged = len(consistent.router.routed())
    seen = interleaved(gw, consistent, sessions, TURNS)
    used = assert_each_session_on_one_worker(gw, seen)
    assert used == {0, 1}  # the sessions spread over both workers
    # The probe's cache experiment ran on one worker (it carries a key of its own): it
    # found the checkpoints each worker has, as on a server alone.
    assert last_stored(gw.store, consistent.url).checkpoint_source == "checkpoint-ring"
    # The gateway's health reads the router's, a plain-text 200: ready, not "lost".
    health = httpx.get(gw.url + "/health", timeout=30)
    assert health.status_code == 200, health.text
    # The router's own log agrees: each session's key went to one worker.
    routed = [
        (k, w)
        for k, w in consistent.router.routed()[logged:]
        if k.startswith("header:x-session-id")
    ]
    assert len(routed) == len(sessions) * TURNS
    by_key: dict[str, set[str]] = {}
    for key, worker in routed:
        by_key.setdefault(key, set()).add(worker)
    assert len(by_key) == len(sessions)
    assert all(len(w) == 1 for w in by_key.values())


def test_router_cache_aware_keeps_each_session_on_one_worker(
    start_gateway: Any, cache_aware: RoutedWorkers
) -> None:
    gw = start_gateway(cache_aware.url)
    seen = interleaved(gw, cache_aware, ("alpha", "beta", "gamma", "delta"), TURNS)
    assert_each_session_on_one_worker(gw, seen)


def test_router_worker_killed_mid_session_fails_visibly_then_moves_to_the_other(
    start_gateway: Any, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """What vllm-router does when a worker dies: it keeps routing there (HTTP 502 or 500,
    no retry on the other worker) until the worker is taken out, by its health check (every
    60 s, 3 failures, by default) or by whoever runs it (``POST /remove_worker``, as its
    Kubernetes discovery does); then the session's calls go to the other worker, which
    processes the prompt again. The gateway answers the failed turn with a clear 503
    naming the router's answer (no traceback: the autouse check) and serves the next."""
    # No health check within the test (its timing would race the failing turn).
    flags = ("--health-check-interval-secs", "3600")
    with routed_workers(request, tmp_path, "consistent_hash", router_flags=flags) as rw:
        gw = start_gateway(rw.url)
        history = [{"role": "system", "content": "Session alpha. " + "You review code. " * 40}]

        def turn(t: int) -> Any:
            history.append({"role": "user", "content": f"alpha step {t}: " + "explain. " * 20})
            before = rw.snapshot()
            with client(gw, "alpha") as c:
                c.chat.completions.create(model=MODEL, messages=history, max_tokens=4)  # type: ignore[arg-type]
            history.append({"role": "assistant", "content": f"done {t}."})
            return rw.served(before)

        first = turn(0)
        assert len(first) == 1
        dead = rw.workers[first[0].worker]
        alive = 1 - first[0].worker
        dead_url = dead.url
        dead.stop()
        # At once: the router still sends there, and the gateway says so.
        with client(gw, "alpha") as c, pytest.raises(openai.InternalServerError) as failed:
            c.chat.completions.create(
                model=MODEL, messages=[*history, {"role": "user", "content": "now?"}], max_tokens=4
            )
        assert failed.value.status_code == 503
        # The router's own words, naming the dead worker: a 502 for the layout's requests
        # (placed by their bodies), a 500 for the chat (placed by the session's key).
        said = str(failed.value.message)
        assert "error sending request for url" in said, said
        assert dead_url in said, said
        # Taken out of the router: the other worker serves.
        httpx.post(
            rw.url + "/remove_worker", params={"url": dead_url}, timeout=10
        ).raise_for_status()
        assert dead_url not in httpx.get(rw.url + "/list_workers", timeout=10).text
        # The dead worker's counters cannot be read any more: only the live one's.
        rw.workers = [w for w in rw.workers if w.url != dead_url]
        moved = turn(1)
        # The one left served it (and, before it, the gateway's probe taken again: the
        # newest task /slots shows is now the other worker's, read as a restart).
        assert [w.worker for w in moved] == [0], (alive, moved)
        found = receipts_of(gw, "alpha")
        assert len(found) == 2  # the failed turn stored no receipt
        # A worker that never saw the session processes its prompt again.
        last = found[-1]
        assert (last.server_cached or 0) < last.prompt_tokens // 10, last
        assert (last.server_processed or 0) > last.prompt_tokens * 9 // 10, last
