"""Predicted against served reuse at every request of a script, Sakur4 through a real
gateway on the real vLLM (issue 40 item 4: "predicted reuse equals vLLM's at every event
of the demo script").

    .venv/bin/python bench/vllm_resume.py                    # starts a vLLM (-c = the window)
    .venv/bin/python bench/vllm_resume.py --url http://127.0.0.1:8000   # one already running

The script is ``--size``'s (the demo: 14 turns, window 4,096); the vLLM it starts has
``max_model_len`` = the script's window, as ``bench/eviction.py --backend vllm`` starts
it. One line per receipt: the prompt, the cut the plan chose, the reuse the gateway
predicted (``predicted_reuse``, from the probe's measured resume model) and vLLM's own
``cached_tokens`` (``server_cached``); then the cut events where the two differ.

Measured 2026-12-07 (2 shared cores, vLLM 0.32 CPU, Gemma 3 270M): see
docs/verification/vllm-resume.md.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

from eviction import vllm_flags, vllm_mode
from strategies import Strategy

from sakur4.backends.vllm_server import VllmServer
from sakur4.demo.compare import run_strategy
from sakur4.demo.script import PRESETS, generate
from sakur4.receipts import Receipt, list_receipts
from sakur4.settings import Settings
from sakur4.store import open_store
from sakur4.store.projects import ensure_project


def receipts(workdir: Path) -> list[Receipt]:
    """Every receipt of the one Sakur4 run under ``workdir`` (its store and project)."""
    (where,) = [p for p in workdir.iterdir() if (p / "sakur4.db").is_file()]
    store = open_store(where / "sakur4.db")
    try:
        found = list_receipts(store, ensure_project(store, where / "project").id, limit=1000)
    finally:
        store.close()
    return sorted(found, key=lambda r: r.id or 0)


def is_cut(r: Receipt) -> bool:
    """A request whose prompt differs from the cached one before its end (a cut event:
    the receipt's divergence; None when the prompt extends the cached one)."""
    return r.divergence is not None


async def run(url: str, size: str, workdir: Path) -> list[Receipt]:
    params = PRESETS[size]
    session = generate(params)
    settings = Settings.load()
    done = await run_strategy(
        Strategy("sakur4", "sakur4"),
        url,
        session,
        settings=settings,
        mode=vllm_mode(params.window),
        summary_tokens=256,
        workdir=workdir,
    )
    failed = sum(1 for r in done.records if r.failed)
    print(f"sakur4: {done.processed:,} processed, {done.rereads} re-reads, {failed} failed")
    return receipts(workdir)


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", help="a running vLLM (else one is started)")
    p.add_argument("--size", default="demo", choices=sorted(PRESETS))
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sakur4-vllm-resume-") as tmp, ExitStack() as stack:
        url = a.url
        if url is None:
            flags = vllm_flags(PRESETS[a.size].window)
            url = stack.enter_context(VllmServer.from_settings(Settings.load(), flags)).url
        got = asyncio.run(run(url, a.size, Path(tmp)))
    heads = ("id", 3), ("turn", 4), ("prompt", 6), ("change", 6), ("cut", 5)
    print(" ".join(f"{h:>{w}}" for h, w in (*heads, ("predicted", 9), ("served", 6))))
    for r in got:
        mark = "" if r.predicted_reuse == r.server_cached else "  <- differs"
        print(
            f"{r.id:>3} {r.turn:>4} {r.prompt_tokens:>6} {r.divergence!s:>6} {r.chosen_cut!s:>5} "
            f"{r.predicted_reuse!s:>9} {r.server_cached!s:>6}{mark}"
        )
    cuts = [r for r in got if is_cut(r)]
    off = [r for r in cuts if r.predicted_reuse != r.server_cached]
    every = [r for r in got if r.predicted_reuse != r.server_cached]
    print(
        f"{len(got)} requests, {len(cuts)} cut events: predicted == served at "
        f"{len(cuts) - len(off)} of {len(cuts)} cuts, "
        f"{len(got) - len(every)} of {len(got)} requests"
    )
    return 0 if not off else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
