"""Crash safety: SIGKILL Sakur4's writers at random moments, many times, and check the store.

    PYTHONPATH=bench nice -n 10 .venv/bin/python -m reliability.crash \
        [--kills 50] [--targets serve-stdio serve-http gateway index] [--seed N]

Targets, each restarted after every kill, all on one store file:

- ``serve-stdio``: ``sakur4 serve`` driven over its pipes with up to 4 requests in
  flight (``remember``, ``anchor_pin``, sometimes ``ledger_index``);
- ``serve-http``: ``sakur4 serve --http`` with 4 concurrent MCP sessions writing notes;
- ``gateway``: ``sakur4 gateway`` in front of a real llama-server, 3 concurrent chat
  sessions (plain and streamed turns, tool calls with their results), retried
  unchanged after a kill as a harness would;
- ``index``: ``sakur4 index`` on a 400-file tree rewritten between runs (parsed in
  transactions of 200 files, so kills land between and inside them).

A kill comes at a random moment after the first write (one in ten during start-up,
migrations included). Answers already on the pipe when the process died count as
acknowledged: the server wrote them, so their writes must be in the store. After
every kill :class:`~reliability.invariants.StoreChecker` runs; the first violation
stops the run and is printed with the seed and round that reproduce it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from reliability.chat import ChatSession
from reliability.invariants import Acks, StoreChecker, index_matches
from reliability.procs import (
    SAKUR4,
    StdioPeer,
    llama_server,
    sakur4_env,
    spawn,
    start_gateway,
    start_http_serve,
    tool_call,
    tool_result,
)
from reliability.projectfiles import ProjectFiles

TARGETS = ("serve-stdio", "serve-http", "gateway", "index")
EARLY_KILL = 0.1  # share of kills during start-up
IN_FLIGHT = 4


@dataclass
class TargetRun:
    """What one target went through."""

    target: str
    kills: int = 0
    early_kills: int = 0  # before the process was ready (start-up, migrations)
    requests: int = 0  # writes sent
    acked: int = 0  # writes acknowledged to the client
    completed_runs: int = 0  # index runs that finished before their kill came
    errors: list[str] = field(default_factory=list)  # unexpected error answers
    seconds: float = 0.0


@dataclass
class CrashHarness:
    """One store, the trees and clients that write to it, and the checker."""

    work: Path
    rng: random.Random
    backend: str | None = None
    files_count: int = 400
    turn_seconds: float = 3.0  # running estimate of a gateway turn, to time kills
    acks: Acks = field(default_factory=Acks)
    violations: list[str] = field(default_factory=list)
    tracebacks: list[str] = field(default_factory=list)
    log: Callable[[str], None] = print

    def __post_init__(self) -> None:
        self.store = self.work / "store" / "sakur4.db"
        self.tree = self.work / "tree"
        self.tree.mkdir(parents=True, exist_ok=True)
        self.chat_root = self.work / "chat-project"
        self.chat_root.mkdir(exist_ok=True)
        self.files = ProjectFiles(self.tree, self.rng)
        self.files.populate(self.files_count)
        self.checker = StoreChecker(self.store, self.files)
        self.sessions = [ChatSession(f"crash-s{i}", self.rng) for i in range(3)]
        self._counter = 0

    def _uid(self) -> int:
        self._counter += 1
        return self._counter

    def _checked(self, label: str, child: Any) -> bool:
        """Run every invariant after a kill; record what failed. True when all held."""
        self.tracebacks += [f"{label}: {t}" for t in child.tracebacks()]
        found = self.checker.check(self.acks)
        self.violations += [f"{label}: {v}" for v in found]
        return not found

    # -- serve over stdio -------------------------------------------------------------

    def serve_stdio(self, run: TargetRun, round_: int) -> bool:
        env = sakur4_env(self.store, self.tree)
        tree = self.files.snapshot()
        peer = StdioPeer(env, self.work)
        label = f"serve-stdio round {round_}"
        if self.rng.random() < EARLY_KILL:
            time.sleep(self.rng.uniform(0.0, 2.0))
            peer.child.kill()
            run.kills += 1
            run.early_kills += 1
            return self._checked(label + " (start-up)", peer.child)
        if not peer.initialize():
            peer.child.kill()
            run.errors.append(f"{label}: no answer to initialize: {peer.child.stderr[-3:]}")
            return False
        inflight: dict[int, tuple[str, str]] = {}
        indexed = False
        deadline = time.monotonic() + self.rng.uniform(0.05, 2.5)

        def settle(answer: dict[str, Any]) -> None:
            nonlocal indexed
            kind, key = inflight.pop(answer.get("id"), ("", ""))  # type: ignore[arg-type]
            if not kind:
                return
            data = tool_result(answer)
            if data is None:
                run.errors.append(f"{label}: {kind} refused: {str(answer)[:200]}")
                return
            run.acked += 1
            if kind == "note":
                self.acks.notes[key] = int(data["episode_id"])
            elif kind == "anchor":
                self.acks.anchors[key] = int(data["anchor"]["id"])
            else:
                indexed = True

        while time.monotonic() < deadline:
            while len(inflight) < IN_FLIGHT:
                rid = self._uid()
                roll = self.rng.random()
                if roll < 0.8:
                    text = f"stdio note {rid} round {round_}"
                    self.acks.notes_sent.add(text)
                    msg, kind = tool_call(rid, "remember", {"text": text}), ("note", text)
                elif roll < 0.95:
                    text = f"stdio anchor {rid}"
                    args = {"text": text, "session": "crash-anchors"}
                    msg, kind = tool_call(rid, "anchor_pin", args), ("anchor", text)
                else:
                    msg, kind = tool_call(rid, "ledger_index", {}), ("index", "")
                if not peer.send(msg):
                    break
                inflight[rid] = kind
                run.requests += 1
            answer = peer.next(min(0.05, deadline - time.monotonic()))
            if answer is not None:
                settle(answer)
        peer.child.kill()
        run.kills += 1
        # Answers already on the pipe were written by the server before it died.
        while (answer := peer.next(0.0)) is not None:
            settle(answer)
        if peer.raw:
            run.errors.append(f"{label}: non-JSON on stdout: {peer.raw[:2]}")
        ok = self._checked(label, peer.child)
        if indexed:
            found = index_matches(self.store, self.files, tree)
            self.violations += [f"{label}: {v}" for v in found]
            self.acks.index_runs += 1
            ok = ok and not found
        return ok

    # -- serve over HTTP --------------------------------------------------------------

    def serve_http(self, run: TargetRun, round_: int) -> bool:
        env = sakur4_env(self.store, self.tree)
        label = f"serve-http round {round_}"
        child, url = start_http_serve(env, self.work)
        asyncio.run(self._http_writers(child, url, run, round_, label))
        run.kills += 1
        return self._checked(label, child)

    async def _http_writers(
        self, child: Any, url: str, run: TargetRun, round_: int, label: str
    ) -> None:
        headers = {"Accept": "application/json, text/event-stream"}
        stop = asyncio.Event()

        async def writer(n: int) -> None:
            async with httpx.AsyncClient(timeout=30, headers=headers) as http:
                try:
                    r = await http.post(url, json=_init(0))
                    sid = r.headers["mcp-session-id"]
                    h = {"mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"}
                    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
                    await http.post(url, json=note, headers=h)
                except (httpx.HTTPError, KeyError):
                    return
                while not stop.is_set():
                    rid = self._uid()
                    text = f"http note {rid} writer {n} round {round_}"
                    self.acks.notes_sent.add(text)
                    run.requests += 1
                    try:
                        r = await http.post(
                            url, json=tool_call(rid, "remember", {"text": text}), headers=h
                        )
                    except httpx.HTTPError:
                        return  # the server died under us: not acknowledged
                    data = tool_result(r.json()) if r.status_code == 200 else None
                    if data is None:
                        run.errors.append(f"{label}: {r.status_code} {r.text[:200]}")
                        return
                    self.acks.notes[text] = int(data["episode_id"])
                    run.acked += 1

        async def killer() -> None:
            await asyncio.sleep(self.rng.uniform(0.3, 3.0))
            child.kill()
            stop.set()

        await asyncio.gather(killer(), *(writer(n) for n in range(IN_FLIGHT)))

    # -- gateway ----------------------------------------------------------------------

    def gateway(self, run: TargetRun, round_: int) -> bool:
        assert self.backend is not None
        from sakur4.backends.launcher import free_port

        port = free_port()
        env = sakur4_env(self.store, self.chat_root, backend=self.backend, backend_timeout="120")
        label = f"gateway round {round_}"
        if self.rng.random() < EARLY_KILL:
            child = spawn(
                [*SAKUR4, "gateway", "--port", str(port)], env, name="gateway", cwd=self.work
            )
            time.sleep(self.rng.uniform(0.0, 5.0))
            child.kill()
            run.kills += 1
            run.early_kills += 1
            return self._checked(label + " (start-up)", child)
        child = start_gateway(env, self.work, port)
        acked = run.acked
        asyncio.run(self._chats(child, f"http://127.0.0.1:{port}", run, label))
        run.kills += 1
        if run.acked == acked:
            # No turn finished before the kill: the estimate only learns from answered
            # turns, so on a slow machine every kill came too early (12 kills, 0 acked).
            self.turn_seconds *= 2
        return self._checked(label, child)

    async def _chats(self, child: Any, url: str, run: TargetRun, label: str) -> None:
        stop = asyncio.Event()

        async def talk(session: ChatSession) -> None:
            async with httpx.AsyncClient(timeout=300) as http:
                while not stop.is_set():
                    run.requests += 1
                    result, acked = await session.turn(http, url, self.acks.sent_turns)
                    if acked is not None:
                        self.acks.turns.append(acked)
                        run.acked += 1
                        self.turn_seconds = 0.8 * self.turn_seconds + 0.2 * result.seconds
                    elif not stop.is_set() and child.alive():
                        run.errors.append(f"{label}: {result.status} {result.error}")
                        return

        async def killer() -> None:
            # Turns take seconds on a loaded machine: spread kills over about two of them.
            await asyncio.sleep(self.rng.uniform(0.1, 2.0 * self.turn_seconds))
            child.kill()
            stop.set()

        await asyncio.gather(killer(), *(talk(s) for s in self.sessions))

    # -- index ------------------------------------------------------------------------

    def index(self, run: TargetRun, round_: int, estimate: list[float]) -> bool:
        self.files.mutate(self.rng.uniform(0.3, 1.0))
        tree = self.files.snapshot()
        env = sakur4_env(self.store, self.tree)
        label = f"index round {round_}"
        started = time.monotonic()
        child = spawn([*SAKUR4, "index", "--json"], env, name="index", cwd=self.work)
        run.requests += 1
        let_finish = self.rng.random() < 0.25
        delay = None if let_finish else self.rng.uniform(0.0, max(estimate) * 1.1)
        try:
            code = child.wait(timeout=delay if delay is not None else 600)
        except subprocess.TimeoutExpired:  # the kill comes now
            child.kill()
            run.kills += 1
            code = None
        ok = self._checked(label, child)
        if code == 0:
            estimate.append(time.monotonic() - started)
            run.acked += 1
            run.completed_runs += 1
            self.acks.index_runs += 1
            found = index_matches(self.store, self.files, tree)
            self.violations += [f"{label}: {v}" for v in found]
            ok = ok and not found
        elif code is not None:
            run.errors.append(f"{label}: exit {code}: {child.stderr[-3:]}")
        return ok


def _init(rid: int) -> dict[str, Any]:
    from reliability.procs import initialize_request

    return initialize_request(rid)


def run_targets(harness: CrashHarness, targets: tuple[str, ...], kills: int) -> list[TargetRun]:
    """``kills`` kills of each target in turn, checking the store after each one."""
    runs = []
    estimate = [3.0]
    for target in targets:
        run = TargetRun(target)
        started = time.monotonic()
        round_ = 0
        while run.kills < kills and not harness.violations:
            round_ += 1
            if target == "serve-stdio":
                harness.serve_stdio(run, round_)
            elif target == "serve-http":
                harness.serve_http(run, round_)
            elif target == "gateway":
                harness.gateway(run, round_)
            else:
                harness.index(run, round_, estimate)
            if run.errors:
                break
        run.seconds = time.monotonic() - started
        harness.log(_line(run))
        runs.append(run)
        if harness.violations or run.errors:
            break
    return runs


def _line(r: TargetRun) -> str:
    return (
        f"{r.target:<12} kills {r.kills:>4} (start-up {r.early_kills:>3})  writes sent "
        f"{r.requests:>6}  acked {r.acked:>6}  completed runs {r.completed_runs:>3}  "
        f"errors {len(r.errors)}  {r.seconds:7.1f} s"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=50, help="kills per target")
    p.add_argument("--targets", nargs="+", choices=TARGETS, default=list(TARGETS))
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--files", type=int, default=400, help="files in the indexed tree")
    p.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = p.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    print(f"seed {seed}; {args.kills} kills per target: {', '.join(args.targets)}")
    work = Path(tempfile.mkdtemp(prefix="sakur4-crash-"))
    with contextlib.ExitStack() as stack:
        backend = None
        if "gateway" in args.targets:
            server = stack.enter_context(llama_server(ctx=8192, log=work / "llama.log"))
            backend = server.url
        harness = CrashHarness(work, random.Random(seed), backend, files_count=args.files)
        runs = run_targets(harness, tuple(args.targets), args.kills)
    total_kills = sum(r.kills for r in runs)
    print(
        f"total: {total_kills} kills survived, {harness.acks.count} acknowledged writes, "
        f"{harness.checker.checks} store checks, {harness.checker.verified} ack verifications, "
        f"{len(harness.checker.facts)} Ledger facts held unchanged"
    )
    problems = harness.violations + harness.tracebacks + [e for r in runs for e in r.errors]
    for v in problems[:20]:
        print("VIOLATION", v)
    print(f"store: {harness.store}" if args.keep else "")
    if not args.keep and not problems:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
