"""A real PostgreSQL server for the store's tests on the PostgreSQL engine (issue 39).

One server per test session (per xdist worker): ``initdb`` into a private temporary
directory, ``pg_ctl start`` listening on a Unix socket in that directory only (no TCP
port at all), ``fsync`` off (the data is thrown away). Each test gets a fresh schema,
named in its URL's ``search_path``: a few milliseconds, where a database each would
cost a copy of the template.

PostgreSQL refuses to run as root: as root (CI, this machine) the server runs as
``nobody``, which owns the temporary directory. The binaries are Debian's
(``/usr/lib/postgresql/<version>/bin``, installed by scripts/setup-tests), or those on
PATH, or ``SAKUR4_TEST_PG_BIN``.

Missing binaries -> the PostgreSQL half of a test skips, or fails under
``--require-backend`` (CI), like the real llama-server.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sakur4.store import Store, open_store
from sakur4.store.projects import Project, add_project

RUN_AS = "nobody"  # when the tests run as root: PostgreSQL refuses root
PORT = 5432  # only names the socket file: the socket directory is private


# Read at import: every test runs with the SAKUR4_* variables cleared (fixtures_common).
BIN_OVERRIDE = os.environ.get("SAKUR4_TEST_PG_BIN")


def find_bin() -> Path | None:
    if BIN_OVERRIDE:
        return Path(BIN_OVERRIDE)
    debian = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name)
    )
    if debian:
        return debian[-1].parent
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path else None


@dataclass
class PostgresServer:
    bin: Path
    dir: Path
    _schemas: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def data(self) -> Path:
        return self.dir / "data"

    def _run(self, *args: str) -> None:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", RUN_AS, "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.dir, user=RUN_AS)
        self._run("initdb", "-D", str(self.data), "-U", "sakur4", "--auth=trust", "-E", "UTF8")
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.dir / "server.log"),
            "-w",
            "-o",
            f"-k {self.dir} -p {PORT} -c listen_addresses='' -c fsync=off "
            "-c full_page_writes=off -c synchronous_commit=off",
            "start",
        )

    def stop(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop")

    def url(self, schema: str | None = None) -> str:
        base = f"postgresql://sakur4@/postgres?host={self.dir}&port={PORT}"
        return base + (f"&options=-csearch_path%3D{schema}" if schema else "")

    def new_schema_url(self) -> str:
        """A URL whose tables live in a schema of their own, created now."""
        import psycopg

        schema = f"t{next(self._schemas)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        return self.url(schema)


def _start_server(request: pytest.FixtureRequest) -> PostgresServer:
    bin_dir = find_bin()
    why = None
    if bin_dir is None or not (bin_dir / "pg_ctl").exists():
        why = "PostgreSQL's binaries are not installed (scripts/setup-tests installs them)"
    else:
        try:
            import psycopg  # noqa: F401
        except ImportError:
            why = "psycopg is not installed (pip install -e '.[postgresql]')"
    if why is not None:
        if request.config.getoption("--require-backend"):
            pytest.fail(why + " (--require-backend)", pytrace=False)
        pytest.skip(why)
    assert bin_dir is not None
    server = PostgresServer(bin=bin_dir, dir=Path(tempfile.mkdtemp(prefix="sakur4-pg-")))
    try:
        server.start()
    except subprocess.CalledProcessError as e:
        server.stop()
        log = server.dir / "server.log"
        detail = (e.stderr or b"").decode(errors="replace").strip()
        if log.exists():
            detail += "\n" + log.read_text(errors="replace")[-2000:]
        shutil.rmtree(server.dir, ignore_errors=True)
        pytest.fail(f"PostgreSQL did not start: {detail}", pytrace=False)
    return server


_SERVER = pytest.StashKey[PostgresServer]()


@pytest.fixture(scope="session")
def postgresql_server(request: pytest.FixtureRequest) -> PostgresServer:
    """One server for the whole session. Each directory's conftest imports this fixture,
    which makes it a fixture of that directory: the server is kept on the run's config,
    so the first directory starts it and the others find it."""
    server = request.config.stash.get(_SERVER, None)
    if server is None:
        server = request.config.stash[_SERVER] = _start_server(request)

        def stop() -> None:
            server.stop()
            shutil.rmtree(server.dir, ignore_errors=True)

        request.config.add_cleanup(stop)
    return server


# What a test directory imports into its conftest to run on both engines: with
# ``pytest_generate_tests = parametrize_engines``, every test there that takes ``store``,
# ``project``, ``store_target`` or ``new_target`` runs once on SQLite (a file) and once
# on PostgreSQL (a fresh schema). SQLite's alone: a test that also takes ``store_path``
# (it opens the file itself: a raw sqlite3 connection, the sqlite3 shell), one that
# parametrizes ``engine`` itself, and the tests named in SQLITE_ONLY.
# SAKUR4_TEST_ENGINES=sqlite: SQLite only (scripts/mutation.py: a server per mutant
# would cost more than the mutant's tests); read at import, as BIN_OVERRIDE is.
ENGINES = tuple(os.environ.get("SAKUR4_TEST_ENGINES", "sqlite,postgresql").split(","))
SQLITE_ONLY = {
    # FTS5's own query syntax and bm25()'s skipping (recall._best); PostgreSQL's
    # skipping has its own test (test_recall_postgresql).
    "test_recall": {
        "test_lexical_query_quotes_every_term",
        "test_bm25_top_rows_equal_the_full_ranking",
        "test_bm25_skipping_is_not_trusted_once_the_index_changed",
    },
}


def parametrize_engines(metafunc: pytest.Metafunc) -> None:
    if "engine" not in metafunc.fixturenames:
        return
    if any("engine" in m.args[0] for m in metafunc.definition.iter_markers("parametrize")):
        return
    module = metafunc.module.__name__.rpartition(".")[2]
    sqlite_only = "store_path" in metafunc.fixturenames or (
        metafunc.function.__name__ in SQLITE_ONLY.get(module, ())
    )
    metafunc.parametrize("engine", ENGINES[:1] if sqlite_only else ENGINES, indirect=True)


@pytest.fixture
def engine(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture
def new_target(engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> Callable[[], str]:
    """Makes a fresh, empty store location each call: a file, or a schema."""
    if engine == "sqlite":
        # The first is the file ``store_path`` names, which some tests open themselves.
        names = (f"sakur4{'' if i == 1 else f'-{i}'}.db" for i in itertools.count(1))
        return lambda: str(tmp_path / "store" / next(names))
    server: PostgresServer = request.getfixturevalue("postgresql_server")
    return server.new_schema_url


@pytest.fixture
def store_target(new_target: Callable[[], str]) -> str:
    return new_target()


@pytest.fixture
def store(store_target: str) -> Iterator[Store]:
    s = open_store(store_target)
    yield s
    s.close()


@pytest.fixture
def project(store: Store, project_dir: Path) -> Project:
    return add_project(store, project_dir)
