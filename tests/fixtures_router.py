"""A real router in front of real llama-server workers (issue 39 item 5).

The router is vLLM's: ``vllm-router`` 0.1.17 (a Rust binary wheel, pinned in the test
extra), started on loopback with a policy of the test's choice in front of two
llama-servers of the packaged model, each niced and small. What decides a route:

- ``consistent_hash``: the ``X-Session-ID`` header (Sakur4's default routing headers
  carry it), else the request's body; the router logs each decision at INFO
  ("Consistent hash routing: key='header:x-session-id:…' -> worker='…'").
- ``cache_aware``: the request's text against a prefix tree per worker, balanced by
  load past its thresholds.

Which worker served a call is read from the workers themselves, not from the router:
each llama-server's ``/metrics`` (``--metrics``), read straight from the worker before
and after the call; only the worker that served it has new decoded and prompt tokens.

Every process is stopped by its own pid (process group) at the end; a test run killed
by a timeout takes them with it (die_with_parent).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from fixtures_llama import REAL_SETTINGS, locate_backend
from gateway_process import wait_for
from sakur4.backends.launcher import LlamaServer, ServerFlags, ServerProcess, free_port

POLICIES = ("consistent_hash", "cache_aware")
# The workers' counters that say what each served (llama-server --metrics).
PROCESSED = "llamacpp:prompt_tokens_total"  # prompt tokens processed, cache hits excluded
CACHED = "llamacpp:prompt_tokens_cached_total"  # prompt tokens reused from the cache
DECODED = "llamacpp:n_decode_total"  # decode calls: any request that ran the model
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ROUTED = re.compile(r"Consistent hash routing: key='([^']*)' -> worker='([^']*)'")


# Read at import, before the autouse fixture clears SAKUR4_* (the test of a missing one).
ROUTER = Path(
    os.environ.get("SAKUR4_TEST_VLLM_ROUTER") or Path(sys.executable).parent / "vllm-router"
)


def router_binary(*, require: bool) -> Path:
    """The ``vllm-router`` the test extra installs beside this Python
    (``SAKUR4_TEST_VLLM_ROUTER`` names another); skip (or fail under --require-backend)
    when missing."""
    found = ROUTER
    if not found.is_file():
        message = f"vllm-router not installed ({found}): run scripts/setup-tests"
        if require:
            pytest.fail(message + " (--require-backend)", pytrace=False)
        pytest.skip(message)
    return found


class NicedLlamaServer(LlamaServer):
    """A worker under ``nice -n 10``: the machine's other tests keep their share."""

    def command(self) -> list[str]:
        return ["nice", "-n", "10", *super().command()]


class VllmRouter(ServerProcess):
    """``vllm-router`` in front of ``workers`` with ``policy``; its Prometheus port is a
    free one (the default, 29000, would collide between test workers)."""

    name = "vllm-router"
    health_path = "/health"  # 200 once every worker answered its own /health

    def __init__(
        self,
        binary: Path,
        workers: Sequence[str],
        policy: str,
        log_path: Path,
        extra: Sequence[str] = (),
    ) -> None:
        super().__init__(log_path=log_path, startup_timeout=60.0, die_with_parent=True)
        self.binary = binary
        self.workers = list(workers)
        self.policy = policy
        self.extra = list(extra)

    def command(self) -> list[str]:
        return [
            "nice",
            "-n",
            "10",
            str(self.binary),
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--worker-urls",
            *self.workers,
            "--policy",
            self.policy,
            "--prometheus-host",
            "127.0.0.1",
            "--prometheus-port",
            str(free_port()),
            # Its first look at the workers waits this long between tries (default 30 s).
            "--worker-startup-check-interval",
            "1",
            "--log-level",
            "info",
            *self.extra,
        ]

    def routed(self) -> list[tuple[str, str]]:
        """(key, worker) of every consistent-hash decision the router logged, in order."""
        text = _ANSI.sub("", self.log_text())
        return _ROUTED.findall(text)


def counters(worker: str) -> dict[str, float]:
    """A worker's --metrics counters, read from the worker itself (not through the router)."""
    text = httpx.get(worker + "/metrics", timeout=10).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name.startswith("llamacpp:") and value:
            out[name] = float(value)
    return out


@dataclass
class Worked:
    """What one worker did during one call: its counters' growth."""

    worker: int  # index in RoutedWorkers.workers
    processed: int
    cached: int


@dataclass
class RoutedWorkers:
    router: VllmRouter
    workers: list[NicedLlamaServer]

    @property
    def url(self) -> str:
        return self.router.url

    def worker_for(self, key: str) -> int:
        """The worker the router sends requests with ``key`` in ``X-Session-ID`` to: asked
        with a call that runs no model (a tokenize), its decision read from its log."""
        logged = len(self.router.routed())
        httpx.post(
            self.url + "/tokenize", json={"content": "x"}, headers={"x-session-id": key}, timeout=10
        ).raise_for_status()
        wait_for("the router's decision", lambda: len(self.router.routed()) > logged, 10)
        routed_key, worker = self.router.routed()[logged]
        assert routed_key == f"header:x-session-id:{key}", routed_key
        return [w.url for w in self.workers].index(worker)

    def snapshot(self) -> list[dict[str, float]]:
        return [counters(w.url) for w in self.workers]

    def served(self, before: Sequence[dict[str, float]]) -> list[Worked]:
        """The workers that ran the model since ``before`` (a :meth:`snapshot`), with the
        prompt tokens each processed and reused meanwhile."""
        out = []
        for i, (was, now) in enumerate(zip(before, self.snapshot(), strict=True)):
            if now[DECODED] > was[DECODED]:
                out.append(
                    Worked(
                        i,
                        int(now[PROCESSED] - was[PROCESSED]),
                        int(now.get(CACHED, 0) - was.get(CACHED, 0)),
                    )
                )
        return out


@contextlib.contextmanager
def routed_workers(
    request: pytest.FixtureRequest,
    where: Path,
    policy: str,
    *,
    slots: int = 4,
    window: int = 2048,
    router_flags: Sequence[str] = (),
) -> Iterator[RoutedWorkers]:
    """Two llama-server workers (``slots`` slots of ``window`` tokens each) and a
    vllm-router with ``policy`` (and ``router_flags``) in front; all stopped on the way
    out."""
    require = bool(request.config.getoption("--require-backend"))
    binary, model = locate_backend(REAL_SETTINGS, require=require)
    router_bin = router_binary(require=require)
    flags = ServerFlags(ctx=window * slots, parallel=slots, threads=1)
    with contextlib.ExitStack() as stack:
        workers = [
            stack.enter_context(
                NicedLlamaServer(
                    binary, model, flags, log_path=where / f"worker{i}.log", die_with_parent=True
                )
            )
            for i in range(2)
        ]
        router = stack.enter_context(
            VllmRouter(
                router_bin, [w.url for w in workers], policy, where / "router.log", router_flags
            )
        )
        yield RoutedWorkers(router, workers)
