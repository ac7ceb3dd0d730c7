"""One writer of the many-writers test (test_many_writers.py), run as a process of its own
with a data directory of its own, as a second machine sharing one PostgreSQL store.

    python writer.py URL NAME PROJECT_ROOT ROUNDS

Each round: a turn's receipt, the shared session's transcript up to that round (every
writer sends the same history, as two gateway replicas serving one session do), a
note (``remember``) and, every fifth round, an index of the shared project. Each
acknowledged write is printed as one JSON line, flushed, only after its transaction
committed: what the parent may count on even when it kills this process.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from sakur4.episodes import record_episodes, remember
from sakur4.ledger.index import index_project
from sakur4.receipts import Receipt, write_receipt
from sakur4.store import open_store
from sakur4.store.projects import add_project


def transcript(rounds: int) -> list[dict[str, str]]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} of the session"}
        for i in range(rounds)
    ]


def main(url: str, name: str, root: str, rounds: int) -> None:
    store = open_store(url)
    project = add_project(store, Path(root))
    history = transcript(rounds)

    def ack(kind: str, value: object) -> None:
        print(json.dumps({"writer": name, "kind": kind, "value": value}), flush=True)

    for turn in range(1, rounds + 1):
        r = write_receipt(
            store,
            Receipt(
                project_id=project.id,
                session=f"{name}-session",
                turn=turn,
                context_window=32768,
                prompt_tokens=100 * turn,
                profile="cache-first",
                profile_reason="many writers",
                verdict="fits",
                cache_verdict="reused",
            ),
        )
        ack("receipt", r.id)
        ids = record_episodes(store, project.id, "shared", turn, history[:turn])
        ack("episodes", ids)
        ack("note", remember(store, project.id, f"{name} note {turn}"))
        if turn % 5 == 0:
            # This writer's own module changes, then the whole project is indexed: the
            # other writer's index may run at the same moment over the same files.
            mine = Path(root) / f"{name}_mod.py"
            tmp = mine.with_suffix(".tmp")
            tmp.write_text(f"def {name}_f():\n    return {turn}\n\n\ndef {name}_g():\n    pass\n")
            tmp.replace(mine)
            ack("index", index_project(store, project).facts_written)
    store.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
