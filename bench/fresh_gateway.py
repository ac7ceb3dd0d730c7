"""Why the first request through a freshly started gateway re-processes more (issue 41,
item 8: each ``wrap`` run started a gateway, and its first request re-processed
617-1,236 tokens where steady state was ~81).

One real llama-server (``-c 8192 --swa-full``, the packaged Gemma 3 270M, one slot), a
tool conversation of three ~790-token ``read`` results:

- ``warm``: its three requests through one gateway;
- ``fresh``: its first two requests through that gateway, the third through a second
  gateway started on the same store (as a second ``wrap`` run would), while the server
  still holds the second request's prompt.

Printed per request, from the receipts: prompt, reused and processed tokens (the
server's own figures), the reuse the gateway predicted, and the steps it took.

Measured 2026-12-06 (load ~25 on 2 cores): the third request re-processed 1,318 of
4,054 tokens through the warm gateway (only the new result) and 2,654 of 2,837
through the fresh one, which predicted 0 cached tokens and folded the second result
(``live -> masked``, 788 -> 8 tokens) on the way: with no layout known for the slot the
planner's base is 0, so every tidy fold looks free (engine/planner.py ``measure``:
``cached_end = 0``), while the server still held that result.

After the planner stopped tidying while the slot's content is unknown (58044a0), at
load ~5: the fresh gateway's third request re-processed 1,318 of 4,054, as the warm
one's (2,736 reused).

    python bench/fresh_gateway.py
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import httpx
from harness_window import llama

from sakur4.backends.launcher import free_port
from sakur4.demo.via_gateway import running_gateway
from sakur4.receipts import list_receipts
from sakur4.settings import Settings
from sakur4.store import open_store
from sakur4.store.projects import ensure_project

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read",
            "description": "read a file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]


def result(n: int, seed: str) -> str:
    rows = (
        f"line {n}.{k}: ledger {seed} row {k * n} reconciled, total {k * 7919 % 1000}"
        for k in range(60)
    )
    return "\n".join(rows)


def conversation(upto: int, seed: str) -> list[dict[str, object]]:
    msgs: list[dict[str, object]] = [
        {"role": "system", "content": f"You are coding agent {seed}. Use the tools to read files."},
        {
            "role": "user",
            "content": f"Project {seed}: read a.py, then b.py, then c.py and summarise.",
        },
    ]
    for i, name in enumerate(["a.py", "b.py", "c.py"][:upto]):
        args = json.dumps({"path": name})
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "read", "arguments": args},
        }
        msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
        msgs.append({"role": "tool", "tool_call_id": f"call_{i}", "content": result(i + 1, seed)})
    return msgs


def ask(url: str, seed: str, upto: int) -> None:
    body = {"model": "m", "messages": conversation(upto, seed), "tools": TOOLS, "max_tokens": 4}
    headers = {"X-Sakur4-Session": f"fresh-gateway-{seed}"}
    httpx.post(
        f"{url}/v1/chat/completions", json=body, headers=headers, timeout=1200
    ).raise_for_status()


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="fresh-gateway-") as tmp:
        work = Path(tmp)
        project = work / "project"
        project.mkdir()
        with llama(work) as server:
            s = Settings.load(
                store=work / "store.db",
                project=project,
                backend=server.url,
                gateway_port=free_port(),
            )
            with running_gateway(s) as gw:
                for n in (1, 2, 3):
                    ask(gw.url, "warm", n)
                for n in (1, 2):
                    ask(gw.url, "fresh", n)
            with running_gateway(s.model_copy(update={"gateway_port": free_port()})) as second:
                ask(second.url, "fresh", 3)
        store = open_store(work / "store.db")
        try:
            got = list_receipts(store, ensure_project(store, project).id, limit=100)
        finally:
            store.close()
    for r in sorted(got, key=lambda r: r.id or 0):
        print(
            f"{r.session[:14]:14} prompt {r.prompt_tokens:5} reused {r.server_cached} "
            f"processed {r.server_processed} predicted {r.predicted_reuse} steps "
            f"{json.dumps(r.steps)[:300]}"
        )


if __name__ == "__main__":
    main()
