from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from sakur4 import __version__
from sakur4.bounds import INT_MAX, INT_MIN
from sakur4.cli import cli


def subcommand(group: click.Group, name: str) -> click.Command:
    """The command ``name`` of ``group`` (the root group imports its commands on demand)."""
    cmd = group.get_command(click.Context(group), name)
    assert cmd is not None, name
    return cmd


def all_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for name in group.list_commands(click.Context(group)):
        cmd = subcommand(group, name)
        found.append((*prefix, name))
        if isinstance(cmd, click.Group):
            found += all_commands(cmd, (*prefix, name))
    return found


def test_every_command_has_help_text() -> None:
    commands = [(), *all_commands(cli)]  # () is `sakur4` itself
    assert len(commands) >= 4
    for path in commands:
        cmd: click.Command = cli
        for part in path:
            assert isinstance(cmd, click.Group)
            cmd = subcommand(cmd, part)
        where = " ".join(("sakur4", *path))
        assert (cmd.help or "").strip(), f"`{where}` has no help text"
        # docs/cli.md is generated from this help: an option without it is undocumented.
        for param in cmd.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert (param.help or "").strip(), f"`{where}` option {param.opts} has no help"
        result = CliRunner().invoke(cli, [*path, "--help"])
        assert result.exit_code == 0, result.output


def test_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert __version__ in result.output


def test_project_add_list_and_scoped_status(tmp_path: Path) -> None:
    store = str(tmp_path / "s.db")
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    r = CliRunner()
    assert r.invoke(cli, ["--store", store, "project", "add", str(a)]).exit_code == 0
    assert (
        r.invoke(cli, ["--store", store, "project", "add", str(b), "--name", "bee"]).exit_code == 0
    )
    listed = r.invoke(cli, ["--store", store, "project", "list"])
    assert "bee" in listed.output
    assert str(a) in listed.output
    from sakur4.store import open_store

    s = open_store(store)
    with s.tx() as c:
        c.execute(
            "INSERT INTO episodic_stream (project_id, session, turn, seq, role, kind, content, "
            "content_hash, tokens) VALUES (2, 's', 1, 0, 'user', 'message', 'b only', 'h', 2)"
        )
    s.close()
    in_a = r.invoke(cli, ["--store", store, "--project", str(a), "status", "--json"])
    in_b = r.invoke(cli, ["--store", store, "--project", str(b / "sub"), "status", "--json"])
    assert '"episodes": 0' in in_a.output
    assert in_b.exit_code == 0
    assert '"episodes": 1' in in_b.output


@pytest.mark.parametrize(
    "args",
    # A write: a read command on a store that does not exist reports nothing recorded.
    [["--store", "/proc/forbidden/s.db", "remember", "x"], ["project", "add", "/does/not/exist"]],
)
def test_errors_are_one_line_without_traceback(args: list[str], tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "sakur4", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert out.stderr.startswith("sakur4: error: ")


def test_bad_setting_is_one_clear_line(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "sakur4", "status"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "SAKUR4_CUT_TOLERANCE": "lots"},
    )
    assert out.returncode == 1
    assert out.stderr.strip() == (
        "sakur4: error: bad setting cut_tolerance (SAKUR4_CUT_TOLERANCE): "
        "Input should be a valid integer, unable to parse string as an integer"
    )


HUGE = "99999999999999999999999"  # more than SQLite's 8-byte INTEGER holds


@pytest.mark.parametrize(
    ("args", "bounds"),
    [
        (["open-fold", HUGE], "1<=x<=9223372036854775807"),
        (["anchor", "unpin", HUGE], "1<=x<=9223372036854775807"),
        (["receipts", "--limit", HUGE], "1<=x<=1000"),
        (["anchor", "pin", "x", "--priority", HUGE], "-1000<=x<=1000"),
    ],
)
def test_a_number_out_of_range_is_one_line(args: list[str], bounds: str, tmp_path: Path) -> None:
    """Issue 15, row 14: these were OverflowError tracebacks from the driver."""
    out = subprocess.run(
        [sys.executable, "-m", "sakur4", "--store", str(tmp_path / "s.db"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("sakur4: error: Invalid value for "), line
    assert f"{HUGE} is not in the range {bounds}. (see `sakur4 " in line


def test_every_integer_option_is_bounded() -> None:
    """One bounded integer type (``cli.common.bounded``) for every integer the CLI takes."""
    for path in all_commands(cli):
        cmd: click.Command = cli
        for part in path:
            assert isinstance(cmd, click.Group)
            cmd = subcommand(cmd, part)
        for param in cmd.params:
            if isinstance(param.type, click.types.IntParamType):
                where = f"`sakur4 {' '.join(path)}` {param.name}"
                assert isinstance(param.type, click.IntRange), where
                lo, hi = param.type.min, param.type.max
                assert lo is not None, where
                assert hi is not None, where
                assert INT_MIN <= lo <= hi <= INT_MAX, where
