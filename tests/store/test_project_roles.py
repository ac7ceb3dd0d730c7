"""Who may see what on a shared PostgreSQL store (issue 39 item 3), on the real server.

Two roles, each granted one project (``sakur4 project grant``), each filling its own
project through Sakur4's functions. Then the attack rows: for every table holding a
project's rows, role A tries to SELECT, UPDATE, DELETE and INSERT project B's rows by
direct SQL, and to reach them through Sakur4's functions, the CLI and the MCP tools.
A leak is a row of B's returned, changed or written by A: the goal is 0. The store's
owner checks afterwards that B's rows are exactly as they were.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import psycopg
import pytest
from click.testing import CliRunner
from mcp import Client

from fixtures_postgresql import PostgresServer
from sakur4.anchors import list_anchors, pin_anchor, unpin_anchor
from sakur4.atlas import atlas_read, atlas_write
from sakur4.cli import cli
from sakur4.doctor import diagnose
from sakur4.episodes.recall import recall
from sakur4.episodes.stream import fetch_episodes, forget_turn, open_fold, remember
from sakur4.errors import AccessRefused, NotFound, StoreUnavailable
from sakur4.ledger.facts import find_symbols
from sakur4.ledger.index import index_project
from sakur4.mcp import build_server
from sakur4.mcp.host import ToolHost
from sakur4.receipts import Receipt, list_receipts, record_harness, write_receipt
from sakur4.settings import Settings
from sakur4.status import project_status
from sakur4.store import Store, open_store
from sakur4.store.postgresql_schema import PROJECT_TABLES
from sakur4.store.projects import Project, add_project, ensure_project, find_project, list_projects
from sakur4.store.roles import grant_project
from sakur4.store.vectors import knn, put_vector

PASSWORD = "pw-0f1e2d3c"  # never to appear in a log line, a receipt or doctor's output


@dataclass
class Side:
    role: str
    url: str
    project: Project
    secret: str
    episodes: tuple[int, int]
    anchor: int


@dataclass
class Two:
    owner: Store
    owner_url: str
    a: Side
    b: Side


def _role_url(server: PostgresServer, schema_url: str, role: str) -> str:
    """The schema's URL as ``role`` with a password (trust auth here: it is not checked,
    but it is in the URL, as a team's would be)."""
    return schema_url.replace("postgresql://sakur4@", f"postgresql://{role}:{quote(PASSWORD)}@")


def _receipt(project_id: int, session: str) -> Receipt:
    return Receipt(
        project_id=project_id,
        session=session,
        turn=1,
        context_window=4096,
        prompt_tokens=100,
        profile="balanced",
        profile_reason="test",
        verdict="fits",
        cache_verdict="reused",
    )


def _fill(store: Store, project: Project, secret: str) -> tuple[tuple[int, int], int]:
    """One row (at least) in every table holding the project's rows, written by the
    role granted the project, through Sakur4's own functions."""
    index_project(store, project)
    (sym,) = find_symbols(store, project.id, secret)
    atlas_write(store, project.id, "mod.py", sym.qualified_name, f"{secret} summary")
    e1 = remember(store, project.id, f"{secret} note", session=secret)
    e2 = remember(store, project.id, f"{secret} fold", session=secret)
    with store.tx() as c:
        c.execute("INSERT INTO episode_dependency (episode_id, depends_on) VALUES (?, ?)", (e2, e1))
    anchor = pin_anchor(store, project.id, f"{secret} rule")
    write_receipt(store, _receipt(project.id, secret))
    record_harness(store, project.id, secret, "claude-code")
    put_vector(
        store, project_id=project.id, owner="episode", owner_id=e1, model="m", vector=[1.0, 0.0]
    )
    return (e1, e2), anchor.id


@pytest.fixture
def two(postgresql_server: PostgresServer, tmp_path: Path) -> Iterator[Two]:
    url = postgresql_server.new_schema_url()
    schema = url.rpartition("%3D")[2]
    owner = open_store(url)
    sides = {}
    try:
        with psycopg.connect(postgresql_server.url(), autocommit=True) as admin:
            for name, secret in (("a", "kestrelowl"), ("b", "zebrafinch")):
                role = f"{name}_{schema}"
                admin.execute(f"CREATE ROLE {role} LOGIN")
                root = tmp_path / name
                root.mkdir()
                (root / "mod.py").write_text(f"def {secret}():\n    return 1\n\n\n{secret}()\n")
                project = add_project(owner, root)
                grant_project(owner, project.id, role)
                role_url = _role_url(postgresql_server, url, role)
                mine = open_store(role_url)
                try:
                    episodes, anchor = _fill(mine, project, secret)
                finally:
                    mine.close()
                sides[name] = Side(role, role_url, project, secret, episodes, anchor)
        yield Two(owner, url, sides["a"], sides["b"])
    finally:
        owner.close()


def _b_rows(two: Two) -> str:
    """A digest of every row of project B, read by the owner (who sees all)."""
    b = two.b.project.id
    out = []
    for t in PROJECT_TABLES:
        rows = two.owner.query(f"SELECT * FROM {t} WHERE project_id = ? ORDER BY 1, 2", (b,))
        assert rows, f"project B has no row in {t}: the attack on it would prove nothing"
        out.append(repr([tuple(r) for r in rows]))
    deps = two.owner.query(
        "SELECT * FROM episode_dependency WHERE episode_id IN (?, ?)", two.b.episodes
    )
    out.append(repr([tuple(r) for r in deps]))
    out.append(repr([tuple(r) for r in two.owner.query("SELECT * FROM project_access")]))
    return hashlib.sha256("\n".join(out).encode()).hexdigest()


@dataclass
class Attack:
    what: str
    leaked: int  # rows of B's returned, changed or written
    refused: bool  # the server refused the statement outright


def _try(conn: psycopg.Connection[Any], what: str, sql: str, params: Any = ()) -> Attack:
    try:
        cur = conn.execute(sql, params)
    except psycopg.errors.InsufficientPrivilege:
        return Attack(what, 0, True)
    except psycopg.Error as e:  # refused otherwise (a check, a trigger): no leak either
        return Attack(f"{what} ({type(e).__name__})", 0, True)
    if cur.description is not None:
        return Attack(what, int(cur.fetchone()[0]), False)
    return Attack(what, cur.rowcount, False)


def _copy_columns(conn: psycopg.Connection[Any], table: str) -> list[str]:
    """The columns an INSERT copying a row may name (not the id, not a generated one)."""
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = "
        "current_schema() AND table_name = %s AND column_name NOT IN ('id', 'seq') "
        "AND is_generated = 'NEVER' ORDER BY ordinal_position",
        (table,),
    ).fetchall()
    return [str(r[0]) for r in rows]


def sql_attacks(two: Two) -> list[Attack]:
    """Role A against project B, statement by statement, by direct SQL."""
    a, b = two.a.project.id, two.b.project.id
    out = []
    with psycopg.connect(two.a.url, autocommit=True) as conn:
        for t in PROJECT_TABLES:
            out.append(
                _try(conn, f"SELECT {t}", f"SELECT count(*) FROM {t} WHERE project_id = {b}")
            )
            out.append(
                _try(conn, f"SELECT {t} not A", f"SELECT count(*) FROM {t} WHERE project_id <> {a}")
            )
            out.append(
                _try(
                    conn,
                    f"UPDATE {t}",
                    f"UPDATE {t} SET project_id = project_id WHERE project_id = {b}",
                )
            )
            out.append(_try(conn, f"DELETE {t}", f"DELETE FROM {t} WHERE project_id = {b}"))
            cols = _copy_columns(conn, t)
            picked = ", ".join(str(b) if c == "project_id" else c for c in cols)
            # A copy of one of A's own rows, as B's (a fresh owner_id: embedding's key).
            picked = picked.replace("owner_id", "owner_id + 1000000")
            out.append(
                _try(
                    conn,
                    f"INSERT {t}",
                    f"INSERT INTO {t} ({', '.join(cols)}) SELECT {picked} FROM {t} "
                    f"WHERE project_id = {a} LIMIT 1",
                )
            )
            out.append(
                _try(
                    conn,
                    f"UPDATE {t} A->B",
                    f"UPDATE {t} SET project_id = {b} WHERE project_id = {a}",
                )
            )
        be1, be2 = two.b.episodes
        ae1, _ = two.a.episodes
        dep = "episode_dependency"
        out += [
            _try(conn, f"SELECT {dep}", f"SELECT count(*) FROM {dep} WHERE episode_id = {be2}"),
            _try(conn, f"DELETE {dep}", f"DELETE FROM {dep} WHERE episode_id = {be2}"),
            _try(conn, f"INSERT {dep} B,B", f"INSERT INTO {dep} VALUES ({be1}, {be2})"),
            _try(conn, f"INSERT {dep} A,B", f"INSERT INTO {dep} VALUES ({ae1}, {be1})"),
            _try(conn, "SELECT project", f"SELECT count(*) FROM project WHERE id = {b}"),
            _try(conn, "INSERT project", "INSERT INTO project (root, name) VALUES ('/x', 'x')"),
            _try(conn, "UPDATE project", f"UPDATE project SET root = '/y' WHERE id = {a}"),
            _try(conn, "DELETE project", f"DELETE FROM project WHERE id = {b}"),
            _try(
                conn,
                "SELECT project_access",
                f"SELECT count(*) FROM project_access WHERE role_name <> '{two.a.role}'",
            ),
            # Escalation: A grants itself B.
            _try(
                conn,
                "INSERT project_access",
                f"INSERT INTO project_access (project_id, role_name) VALUES ({b}, '{two.a.role}')",
            ),
            _try(conn, "UPDATE project_access", f"UPDATE project_access SET project_id = {b}"),
            _try(conn, "SET ROLE b", f"SET ROLE {two.b.role}"),
            _try(conn, "disable RLS", "ALTER TABLE receipt DISABLE ROW LEVEL SECURITY"),
            _try(conn, "drop policy", "DROP POLICY granted_projects ON receipt"),
            _try(conn, "TRUNCATE receipt", "TRUNCATE receipt"),
        ]
        conn.execute("SET row_security = off")  # "bypass or fail": it must fail
        out.append(
            _try(conn, "row_security off", f"SELECT count(*) FROM receipt WHERE project_id = {b}")
        )
    return out


def test_sql_attack_rows_leak_nothing(two: Two) -> None:
    before = _b_rows(two)
    attacks = sql_attacks(two)
    leaks = [x for x in attacks if x.leaked]
    assert not leaks, leaks
    assert _b_rows(two) == before  # B's rows, and the grants, exactly as they were
    # Every write at B was refused or reached no row; every write naming B refused.
    for x in attacks:
        if x.what.startswith(("INSERT", "UPDATE project", "SET ROLE", "disable", "drop", "TRUNC")):
            assert x.refused, x
        if x.what.endswith("A->B") or x.what == "row_security off":
            assert x.refused, x
    assert len(attacks) == 6 * len(PROJECT_TABLES) + 16


def test_a_granted_role_works_in_its_own_project(two: Two) -> None:
    """The policies let A do all of Sakur4's work in A (the fixture wrote every table as
    A and as B); and A reads back its own rows."""
    s = open_store(two.a.url)
    try:
        a = two.a.project
        assert list_projects(s) == [a]
        assert find_project(s, a.root) == a
        counts = project_status(s, a.id)
        assert counts["episodes"] == 2
        assert counts["anchors"] == 1
        assert counts["receipts"] == 1
        assert [h.episode.id for h in recall(s, a.id, two.a.secret)][:1]
        assert len(fetch_episodes(s, a.id, list(two.a.episodes))) == 2
        assert open_fold(s, a.id, two.a.episodes[1]).depends_on == (two.a.episodes[0],)
        # A delete bumps recall's shared counter, which the role may not write itself.
        e1, e2 = two.a.episodes
        with s.tx() as c:
            c.execute("DELETE FROM episode_dependency WHERE episode_id = ?", (e2,))
            assert c.execute("DELETE FROM episodic_stream WHERE id = ?", (e2,)).rowcount == 1
        assert list(fetch_episodes(s, a.id, [e1, e2])) == [e1]
    finally:
        s.close()


def test_sakur4_functions_refuse_or_find_nothing_of_another_project(two: Two) -> None:
    s = open_store(two.a.url)
    b, secret = two.b.project, two.b.secret
    be1, be2 = two.b.episodes
    try:
        assert find_project(s, b.root) is None
        with pytest.raises(AccessRefused, match=f"not granted to role {two.a.role}"):
            ensure_project(s, b.root)
        with pytest.raises(AccessRefused, match="not granted"):
            add_project(s, b.root)
        # Reads: nothing of B's, whichever id or project is named.
        assert fetch_episodes(s, b.id, [be1, be2]) == {}
        assert fetch_episodes(s, two.a.project.id, [be1, be2]) == {}
        with pytest.raises(NotFound):
            open_fold(s, b.id, be1)
        assert recall(s, b.id, secret) == []
        assert list_receipts(s, b.id) == []
        assert list_anchors(s, b.id, include_unpinned=True) == []
        assert find_symbols(s, b.id, secret) == []
        with pytest.raises(NotFound):
            atlas_read(s, b.id)
        assert set(project_status(s, b.id).values()) == {0}
        assert knn(s, project_id=b.id, owner="episode", model="m", query=[1.0, 0.0], k=5) == []
        with pytest.raises(NotFound):
            unpin_anchor(s, b.id, two.b.anchor)
        assert forget_turn(s, b.id, secret, 0) == 0
        # Writes into B: refused by the server, one line.
        refused = [
            lambda: write_receipt(s, _receipt(b.id, secret)),
            lambda: pin_anchor(s, b.id, "mine now"),
            lambda: remember(s, b.id, "planted"),
            lambda: record_harness(s, b.id, secret, "x"),
            lambda: index_project(s, b),
        ]
        for write in refused:
            with pytest.raises(AccessRefused) as e:
                write()
            assert "\n" not in str(e.value)
            assert PASSWORD not in str(e.value)
    finally:
        s.close()
    assert project_status(two.owner, b.id)["episodes"] == 2


def test_cli_and_mcp_refuse_another_project_in_one_line(two: Two) -> None:
    b = two.b.project
    for args in (["status"], ["receipts"], ["episodes", "list"], ["anchor", "list"]):
        run = CliRunner().invoke(cli, ["--store", two.a.url, "--project", str(b.root), *args])
        assert run.exit_code == 1, (args, run.output)
        (line,) = run.output.strip().splitlines()
        assert line.startswith("sakur4: error: project ")
        assert "not granted to role" in line
        assert PASSWORD not in run.output
        assert "Traceback" not in run.output
    mine = CliRunner().invoke(
        cli, ["--store", two.a.url, "--project", str(two.a.project.root), "status"]
    )
    assert mine.exit_code == 0
    assert "episodes" in mine.output

    s = open_store(two.a.url)
    settings = Settings.load(store=two.a.url, project=two.a.project.root)

    async def calls(register: bool) -> list[str]:
        server = build_server(ToolHost(settings, s, register_new_projects=register))
        out = []
        async with Client(server) as client:
            for name, args in (
                ("recall", {"query": two.b.secret}),
                ("receipts", {}),
                ("open_fold", {"episode_id": two.b.episodes[0]}),
                ("anchor_list", {}),
            ):
                r = await client.call_tool(name, {**args, "project": str(b.root)})
                assert r.is_error, (name, r.structured_content)
                out.append(" ".join(getattr(c, "text", "") for c in r.content))
        return out

    try:
        for register in (True, False):
            for text in anyio.run(calls, register):
                assert "not granted to role" in text, text
                assert two.b.secret not in text
    finally:
        s.close()


def test_the_password_never_shows(
    two: Two, postgresql_server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    """In no log line, error, receipt or doctor output: the store's URL is shown masked."""
    caplog.set_level(logging.DEBUG)
    s = open_store(two.a.url)
    try:
        write_receipt(s, _receipt(two.a.project.id, "pw-check"))
        stored = json.dumps([tuple(r) for r in s.query("SELECT * FROM receipt")])
        with pytest.raises(AccessRefused) as refused:
            pin_anchor(s, two.b.project.id, "x")
        label = s.label
    finally:
        s.close()
    unreachable = two.a.url.replace("host=", "host=/nonexistent")
    with pytest.raises(StoreUnavailable) as down:
        open_store(unreachable)
    report = json.dumps(diagnose(store=two.a.url, project=two.a.project.root).as_dict())
    doctor_cli = CliRunner().invoke(cli, ["--store", two.a.url, "doctor"])
    shown = {
        "logs": caplog.text,
        "receipts": stored,
        "refusal": str(refused.value),
        "unreachable": str(down.value),
        "label": label,
        "doctor": report,
        "doctor cli": doctor_cli.output,
    }
    assert not [k for k, v in shown.items() if PASSWORD in v], shown
    assert ":***@" in label
    assert ":***@" in str(down.value)
    assert ":***@" in report


def test_project_grant_and_revoke_through_the_cli(two: Two, tmp_path: Path) -> None:
    a_root, b_role = str(two.a.project.root), two.b.role

    def run(*args: str, store: str = two.owner_url) -> tuple[int, str]:
        r = CliRunner().invoke(cli, ["--store", store, *args])
        return r.exit_code, r.output.strip()

    def b_sees() -> list[Project]:
        s = open_store(two.b.url)
        try:
            return list_projects(s)
        finally:
            s.close()

    assert run("project", "grant", a_root, b_role) == (
        0,
        f"role {b_role} may now reach project {a_root}",
    )
    assert two.a.project in b_sees()
    assert run("project", "revoke", a_root, b_role)[0] == 0
    assert b_sees() == [two.b.project]
    # Refused, one line each: an unknown role, a role that bypasses the policies, a
    # role granting itself, and a SQLite store.
    for args, store, said in (
        ((a_root, "nobody_here"), two.owner_url, "does not exist"),
        ((a_root, "sakur4"), two.owner_url, "sees every project"),
        ((str(two.b.project.root), two.a.role), two.b.url, "may not do that"),
        ((a_root, two.a.role), str(tmp_path / "s.db"), "PostgreSQL store"),
    ):
        if store.endswith(".db"):
            run("project", "add", a_root, store=store)
        code, out = run("project", "grant", *args, store=store)
        assert code == 1, out
        assert out.startswith("sakur4: error: ")
        assert said in out
        assert "\n" not in out


def test_a_group_role_grants_its_members(two: Two, postgresql_server: PostgresServer) -> None:
    """A team's role (NOLOGIN) granted a project: each member reaches it, no one else."""
    schema = two.owner_url.rpartition("%3D")[2]
    team, member = f"team_{schema}", f"c_{schema}"
    with psycopg.connect(postgresql_server.url(), autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {team} NOLOGIN")
        admin.execute(f"CREATE ROLE {member} LOGIN IN ROLE {team}")
    grant_project(two.owner, two.a.project.id, team)
    s = open_store(_role_url(postgresql_server, two.owner_url, member))
    try:
        assert list_projects(s) == [two.a.project]
        assert project_status(s, two.a.project.id)["receipts"] == 1
        assert project_status(s, two.b.project.id)["receipts"] == 0
    finally:
        s.close()
