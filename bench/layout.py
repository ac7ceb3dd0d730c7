"""Token layout cost per turn as a conversation grows: cached (incremental) vs uncached.

Starts the set-up's llama-server (loopback, -c 32768), grows a scripted agent
conversation turn by turn, and prints, per turn, the prompt size and the time and
bytes tokenized for the cached layout next to a fresh (uncached) one — the
baseline that renders every prefix and tokenizes the whole prompt each turn.

    .venv/bin/python bench/layout.py [--turns 40]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from sakur4.backends.launcher import LlamaServer, ServerFlags
from sakur4.backends.layout import TokenLayouts
from sakur4.backends.llamacpp import LlamaCppClient
from sakur4.settings import Settings


def turn(i: int) -> list[dict[str, Any]]:
    body = "\n".join(f"    line_{i}_{j} = compute({j}, 'value {j}')" for j in range(40))
    return [
        {"role": "user", "content": f"Step {i}: open module_{i}.py and check compute()."},
        {"role": "assistant", "content": f"Reading module_{i}.py."},
        {"role": "tool", "tool_call_id": f"c{i}", "content": f"def f{i}():\n{body}\n"},
    ]


async def main(turns: int) -> None:
    flags = ServerFlags(ctx=32768)
    with LlamaServer.from_settings(Settings.load(), flags) as server:
        async with LlamaCppClient(server.url, timeout=600) as c:
            cached = TokenLayouts(c)
            msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coder."}]
            print("turn  tokens  messages | cached ms  bytes tokenized | uncached ms  bytes")
            for i in range(turns):
                msgs += turn(i)
                body = {"messages": [*msgs, {"role": "user", "content": "Next?"}]}
                t0 = time.perf_counter()
                a = await cached.layout(body)
                t1 = time.perf_counter()
                b = await TokenLayouts(c).layout(body)
                t2 = time.perf_counter()
                if a.tokens != b.tokens or a.spans != b.spans:
                    raise SystemExit(f"turn {i + 1}: cached and fresh layouts differ")
                print(
                    f"{i + 1:4d} {len(a.tokens):7d} {len(a.spans):9d} | "
                    f"{(t1 - t0) * 1000:9.1f} {a.tokenized_bytes:16d} | "
                    f"{(t2 - t1) * 1000:11.1f} {b.tokenized_bytes:6d}"
                )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=40)
    asyncio.run(main(parser.parse_args().turns))
