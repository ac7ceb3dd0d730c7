"""The prompt the gateway sends never exceeds the window the server reported.

Issue 14: an OpenAI-SDK tool conversation on a small server got
``exceed_context_size_error`` from the backend at turn 5 — the plan's estimate of
new code (characters / 4) was short by a fifth — and every turn after failed. The
gateway now measures the rendered prompt with the server's own tokenizer and plans
again when it is larger than the window; what cannot fit is refused with figures.
"""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path
from typing import Any

import openai
import pytest

from fixtures_llama import REAL_SETTINGS, locate_backend
from sakur4.backends.launcher import LlamaServer, ServerFlags
from sakur4.receipts import list_receipts
from sakur4.store import open_store
from sakur4.store.projects import ensure_project

WINDOW = 2048
# Six turns evict three times (measured: reclaimed at turns 3 and 5, stepping from 6);
# ten evicted the same ways at twice the time, in the fast tier.
TURNS = 6
SESSION = "window"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


def _source(name: str, chars: int) -> str:
    # Real code: it tokenizes denser than the four characters a token estimated.
    return (Path(sysconfig.get_paths()["stdlib"]) / name).read_text()[:chars]


@pytest.mark.backend
def test_every_prompt_fits_the_window_on_a_dense_tool_conversation(
    request: pytest.FixtureRequest, tmp_path: Path, start_gateway: Any
) -> None:
    binary, model = locate_backend(
        REAL_SETTINGS, require=bool(request.config.getoption("--require-backend"))
    )
    flags = ServerFlags(ctx=WINDOW, checkpoint_min_step=256)
    with LlamaServer(binary, model, flags, log_path=tmp_path / "server.log") as server:
        gw = start_gateway(server.url, checkpoint_min_step=256, live_results=1)
        messages: list[dict[str, Any]] = [{"role": "system", "content": "You read code."}]
        files = ["json/decoder.py", "json/encoder.py", "csv.py", "shlex.py", "textwrap.py"]
        statuses: list[int] = []
        refusals: list[str] = []
        with openai.OpenAI(
            base_url=gw.url + "/v1",
            api_key="unused",
            max_retries=0,
            default_headers={"X-Sakur4-Session": SESSION},
        ) as client:
            for turn in range(TURNS):
                messages.append({"role": "user", "content": f"Read file {turn} and summarise it."})
                cid = f"call_{turn}"
                messages.append(
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": cid,
                                "type": "function",
                                "function": {
                                    "name": "read_file",
                                    "arguments": json.dumps({"path": files[turn % len(files)]}),
                                },
                            }
                        ],
                    }
                )
                body = _source(files[turn % len(files)], 1500 + 150 * (turn % 4))
                messages.append({"role": "tool", "tool_call_id": cid, "content": body})
                try:
                    client.chat.completions.create(
                        model="any", messages=messages, max_tokens=2, tools=TOOLS, temperature=0
                    )
                    statuses.append(200)
                except openai.APIStatusError as e:
                    statuses.append(e.status_code)
                    refusals.append(str(e.body))
                messages.append({"role": "assistant", "content": f"File {turn} read."})
        assert statuses.count(200) >= TURNS - 1, statuses
        for body in refusals:  # only Sakur4's own refusal, with the figures; never the backend's
            assert "exceed_context_size" not in body, body
            assert "everything older folded" in body, body

    store = open_store(gw.store)
    try:
        project = ensure_project(store, gw.project)
        receipts = list_receipts(store, project.id, session=SESSION, limit=100)
    finally:
        store.close()
    sent = [r for r in receipts if r.verdict != "refused"]
    assert sent
    assert all(r.prompt_tokens <= WINDOW for r in sent), [r.prompt_tokens for r in sent]
    assert all(not r.detail.get("failed") for r in sent)
    assert any(r.verdict in ("reclaimed", "stepping") for r in sent)  # it did evict
