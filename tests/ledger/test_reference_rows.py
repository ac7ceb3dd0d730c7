"""Reference rows are counted per (file, from, to, kind) since m005; the repo map and
impact read them exactly as they read one row per use (what older stores hold)."""

from __future__ import annotations

from pathlib import Path

from sakur4.ledger import impact, index_project, repo_map
from sakur4.ledger import repomap as repomap_module
from sakur4.store import Store
from sakur4.store.projects import Project

FILES = {
    "core.py": "def hub(x):\n    return x\n\n\ndef rim(x):\n    return x\n",
    # use0 calls hub four times and rim once: one counted row each.
    "user0.py": "from core import hub, rim\n\n\ndef use0():\n"
    + "".join(f"    hub({i})\n" for i in range(4))
    + "    return rim(0)\n",
    "user1.py": "from core import rim\n\n\ndef use1():\n    return rim(1)\n",
}


def _readings(store: Store, project_id: int) -> tuple[object, ...]:
    repomap_module._GRAPHS.clear()  # keyed by facts and files, not reference rows
    ranked = [(e.qualified_name, e.rank) for e in repo_map(store, project_id, 1000).entries]
    return (
        ranked,
        impact(store, project_id, "hub").as_dict(),
        impact(store, project_id, "rim").as_dict(),
    )


def test_counted_rows_read_as_one_row_per_use(
    store: Store, project: Project, project_dir: Path
) -> None:
    for name, text in FILES.items():
        (project_dir / name).write_text(text)
    index_project(store, project)
    rows = store.query(
        "SELECT project_id, path, from_name, to_name, kind, line, uses FROM symbol_ref"
    )
    assert max(r["uses"] for r in rows) == 4
    assert len(rows) == len({(r[1], r[2], r[3], r[4]) for r in rows})
    counted = _readings(store, project.id)
    with store.tx() as c:  # the same references, one row per use, as before m005
        c.execute("DELETE FROM symbol_ref")
        c.executemany(
            "INSERT INTO symbol_ref (project_id, path, from_name, to_name, kind, line) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [tuple(r)[:6] for r in rows for _ in range(r["uses"])],
        )
    assert _readings(store, project.id) == counted
