"""Drop-oldest on a sliding-window model with ``--swa-full``: when does a drop re-process
the whole prompt? (issue 28: the real drop-oldest ``--swa-full`` runs re-prefilled from
token 0 on about half their drops, where any prefix should resume.)

    nice -n 10 .venv/bin/python bench/swa_prompt_cache.py [--turns 12]

The set-up's llama-server and packaged Gemma 3 (sliding window 512) with ``--swa-full``,
``-c 2048``, ``-lv 4``; a conversation of a ~560-token system prompt and turns of ~160
tokens whose user messages open with "alpha" and "beta" in turn, kept at the newest four
turns by dropping the oldest one (what drop-oldest does). Each call's ``prompt_n`` and
``cache_n`` are printed, first with the server's RAM prompt cache on (its default,
``--cache-ram`` 8192 MiB), then off (``--cache-ram 0``), and the server log's
``found better prompt`` (a saved prompt swapped into the slot) and ``forcing full prompt
re-processing`` lines are counted.

What it shows: a drop makes the slot keep less than half its tokens, so llama-server
saves the slot to its RAM cache and looks there for a saved prompt sharing more with the
new one. With the user messages alternating, the prompt saved two drops ago shares a
token or two more than the slot's own (its first user message opens like the new
one's) and is swapped in; a restored sliding-window state holds only the window
(BACKEND-FACTS), so the server finds nothing to resume from and re-processes everything,
where the slot's own state would have resumed after the system prompt.
"""

from __future__ import annotations

import argparse
import random
import textwrap
from pathlib import Path
from typing import Any

import httpx

from sakur4.backends.launcher import LlamaServer, ServerFlags, ensure_model, find_llama_server
from sakur4.settings import Settings

SWAPPED = "found better prompt"
FORCED = "forcing full prompt re-processing"


def conversation(turns: int) -> list[list[dict[str, Any]]]:
    """Per call, the messages drop-oldest sends: the system prompt and the newest four turns."""
    rng = random.Random(1)
    words = Path(textwrap.__file__).read_text().split()

    def text(n: int) -> str:
        return " ".join(rng.choice(words) for _ in range(n))

    head = {"role": "system", "content": "You are a coding agent. " + text(300)}
    kept: list[list[dict[str, Any]]] = []
    calls = []
    for i in range(turns):
        opening = "alpha" if i % 2 == 0 else "beta"
        user = {"role": "user", "content": f"{opening} turn {i}: " + text(120)}
        kept.append([user, {"role": "assistant", "content": text(40)}])
        kept = kept[-4:]
        calls.append([head, *(m for t in kept for m in t)][:-1])  # ends on the user message
    return calls


def run(calls: list[list[dict[str, Any]]], cache_ram: int | None, log: Path) -> list[str]:
    flags = ServerFlags(ctx=2048, swa_full=True, cache_ram=cache_ram, verbosity=4)
    settings = Settings.load()
    binary, model = find_llama_server(settings), ensure_model(settings)
    server = LlamaServer(binary, model, flags, log_path=log, die_with_parent=True)
    rows = []
    with server, httpx.Client(timeout=900) as http:
        for i, messages in enumerate(calls):
            body = {"messages": messages, "max_tokens": 2, "temperature": 0, "cache_prompt": True}
            timings = http.post(f"{server.url}/v1/chat/completions", json=body).json()["timings"]
            rows.append(f"{i}\t{timings['prompt_n']}\t{timings.get('cache_n', 0)}")
        text = server.log_text()
    rows.append(f"swapped in: {text.count(SWAPPED)}, re-processed from 0: {text.count(FORCED)}")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--turns", type=int, default=12)
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    calls = conversation(a.turns)
    for label, cache_ram in (("--cache-ram default (8192 MiB)", None), ("--cache-ram 0", 0)):
        name = "default" if cache_ram is None else "off"
        print(f"## {label}\ncall\tprocessed\tcached")
        for row in run(calls, cache_ram, a.out / f"swa-prompt-cache-{name}.log"):
            print(row, flush=True)


if __name__ == "__main__":
    main()
