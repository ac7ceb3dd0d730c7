"""A project root must be a project: what implicit registration refuses (issue 15, row 12)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sakur4.errors import InputError
from sakur4.store import Store
from sakur4.store.projects import add_project, ensure_project, find_project, not_a_project


@pytest.mark.parametrize(
    ("root", "why"),
    [
        ("/", "it is the root of the file system"),
        ("/usr", "it is a system directory"),
        ("/tmp", "it is a system directory"),
        ("/home", "it is a system directory"),
        ("/etc/ssh", "it is inside a system directory"),
        ("/usr/lib/python3", "it is inside a system directory"),
        ("/proc/self", "it is inside a system directory"),
    ],
)
def test_system_roots_are_refused(store: Store, root: str, why: str) -> None:
    with pytest.raises(InputError, match=f"refusing to use .* as a project root: {why}"):
        ensure_project(store, Path(root))
    assert store.query("SELECT count(*) FROM project")[0][0] == 0


def test_the_home_directory_and_its_ancestors_are_refused(store: Store, tmp_path: Path) -> None:
    home = Path.home()  # the tests' own home (conftest moves HOME to a temporary one)
    for root, why in ((home, "it is the home directory"), (home.parent, "contains the home")):
        with pytest.raises(InputError, match=why):
            ensure_project(store, root)
    inside = home / "work" / "app"
    inside.mkdir(parents=True)
    assert not_a_project(inside) is None
    assert ensure_project(store, inside).root == inside.resolve()
    assert not_a_project(tmp_path) is None  # a project may live under /tmp, /srv, /opt


def test_explicit_registration_may_name_any_directory(store: Store) -> None:
    """`sakur4 project add /` is the user's own decision; every surface may use it then."""
    registered = add_project(store, Path("/"))
    assert find_project(store, Path("/")) == registered
    assert ensure_project(store, Path("/")) == registered
