"""`sakur4 index`, `map`, `symbol`, `impact` (each with --json), and doctor's grammar line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sakur4 import doctor
from sakur4.cli import cli
from sakur4.parsers import registry, tags

FILES = {
    "lib.py": "def helper(x):\n    return x\n",
    "app.py": "from lib import helper\n\n\ndef main():\n    return helper(1)\n",
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def run(tmp_path: Path, repo: Path, *args: str) -> Any:
    result = CliRunner().invoke(
        cli, ["--store", str(tmp_path / "s.db"), "--project", str(repo), *args]
    )
    return result


def as_json(result: Any) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_index_then_query_with_json(tmp_path: Path, repo: Path) -> None:
    report = as_json(run(tmp_path, repo, "index", "--json"))
    assert (report["files_parsed"], report["facts_written"]) == (2, 2)
    assert report["skipped"] == {}
    again = as_json(run(tmp_path, repo, "index", "--json"))
    assert (again["files_parsed"], again["files_unchanged"]) == (0, 2)

    facts = as_json(run(tmp_path, repo, "symbol", "helper", "--json"))
    assert [(f["qualified_name"], f["path"], f["start_line"]) for f in facts] == [
        ("lib.helper", "lib.py", 1)
    ]
    m = as_json(run(tmp_path, repo, "map", "--budget", "50", "--json"))
    assert m["entries"][0]["qualified_name"] == "lib.helper"
    assert m["tokens"] <= 50
    imp = as_json(run(tmp_path, repo, "impact", "helper", "--depth", "2", "--json"))
    assert {(e["depth"], e["qualified_name"]) for e in imp["entries"]} == {
        (0, "lib.helper"),
        (1, "app.main"),
        (1, "app"),
    }
    assert not any(e["stale"] for e in imp["entries"])


def test_human_output(tmp_path: Path, repo: Path) -> None:
    out = run(tmp_path, repo, "index")
    assert out.exit_code == 0
    assert "2 parsed" in out.output
    assert "lib.helper" in run(tmp_path, repo, "symbol", "lib.helper").output
    m = run(tmp_path, repo, "map")
    assert "lib.py\n  1: def helper(x):" in m.stdout
    assert "tokens" in m.stderr
    assert "app.main" in run(tmp_path, repo, "impact", "helper").output


def test_symbol_history_and_removed(tmp_path: Path, repo: Path) -> None:
    run(tmp_path, repo, "index")
    (repo / "lib.py").write_text("def helper(x):\n    return x * 2\n")
    run(tmp_path, repo, "index")
    hist = as_json(run(tmp_path, repo, "symbol", "lib.helper", "--history", "--json"))
    assert len(hist) == 2
    assert hist[0]["symbol_hash"] != hist[1]["symbol_hash"]
    (repo / "lib.py").unlink()
    run(tmp_path, repo, "index")
    gone = run(tmp_path, repo, "symbol", "lib.helper")
    assert gone.exit_code == 1
    assert "no symbol" in gone.output
    removed = run(tmp_path, repo, "symbol", "lib.helper", "--path", "lib.py")
    assert "REMOVED" in removed.output


def test_errors_are_one_line(tmp_path: Path, repo: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    out = run(tmp_path, repo, "index", str(tmp_path / "elsewhere"))
    assert out.exit_code == 1
    assert out.output.count("\n") == 1
    assert "outside the project root" in out.output
    assert "Traceback" not in out.output
    out = run(tmp_path, repo, "impact", "nothing_here")
    assert out.exit_code == 1
    assert "nothing is indexed yet" in out.output
    out = run(tmp_path, repo, "map", "--budget", "0")  # the option's own bound (sakur4.bounds)
    assert out.exit_code == 2
    assert "0 is not in the range 1<=x<=100000" in out.output


def test_empty_map_says_how_to_fill_it(tmp_path: Path, repo: Path) -> None:
    out = run(tmp_path, repo, "map")
    assert out.exit_code == 0
    assert "sakur4 index" in out.stderr


def test_doctor_lists_the_grammars_that_load(monkeypatch: pytest.MonkeyPatch) -> None:
    def grammars() -> str:
        report = doctor.diagnose()
        (line,) = [c for c in report.checks if c.name == "grammars"]
        return f"{line.level}: {line.detail}"

    assert grammars() == "ok: python, javascript, typescript, tsx, go, rust"
    # A grammar whose queries do not compile is named, the others still load.
    broken = registry.LanguageSpec(
        name="python",
        extensions=(".py",),
        grammar=registry.LANGUAGES[0].grammar,
        queries=(registry.QueryFile("sakur4.parsers", "queries/no-such.scm"),),
    )
    monkeypatch.setattr(tags, "LANGUAGES", (broken, *registry.LANGUAGES[1:]))
    got = grammars()
    assert got.startswith("fail: loaded: javascript, typescript, tsx, go, rust; failed: python")
    assert "no-such.scm" in got
