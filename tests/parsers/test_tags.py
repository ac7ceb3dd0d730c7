"""The parser adapter: one fixture per language gives known symbols and references."""

from __future__ import annotations

from pathlib import Path

import pytest

from sakur4.errors import LedgerError
from sakur4.parsers import (
    LANGUAGES,
    ParsedFile,
    grammar_status,
    language_for_path,
    module_name,
    parse_source,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "lang"

# (qualified name, kind, first line, last line) — every symbol, in order.
EXPECTED_SYMBOLS: dict[str, list[tuple[str, str, int, int]]] = {
    "sample.py": [
        ("sample.LIMIT", "constant", 6, 6),
        ("sample.helper", "function", 9, 10),
        ("sample.Base", "class", 13, 14),
        ("sample.Shape", "class", 17, 29),
        ("sample.Shape.area", "method", 20, 21),
        ("sample.Shape.name", "method", 23, 25),  # the decorator line belongs to it
        ("sample.Shape.name~2", "method", 27, 29),  # the setter: same name, own fact
        ("sample.outer", "function", 32, 36),
        ("sample.outer.inner", "function", 33, 34),
    ],
    "sample.js": [
        ("sample.Animal", "class", 5, 5),
        ("sample.Dog", "class", 7, 11),
        ("sample.Dog.bark", "method", 8, 10),
        ("sample.repeat", "function", 13, 15),
        ("sample.makeDog", "function", 17, 17),
    ],
    "sample.ts": [
        ("sample.Shape", "interface", 4, 6),
        ("sample.Shape.area", "method", 5, 5),
        ("sample.Point", "type", 8, 8),
        ("sample.Color", "enum", 10, 13),
        ("sample.Circle", "class", 15, 21),
        ("sample.Circle.area", "method", 18, 20),
        ("sample.square", "function", 23, 25),
        ("sample.describe", "function", 27, 29),
    ],
    "sample.tsx": [
        ("sample.Props", "interface", 4, 6),
        ("sample.Button", "function", 8, 11),
        ("sample.Panel", "class", 13, 17),
        ("sample.Panel.render", "method", 14, 16),
    ],
    "sample.go": [
        ("sample.Server", "type", 9, 11),
        ("sample.Handler", "type", 13, 15),
        ("sample.NewServer", "function", 17, 19),
        ("sample.Server.Start", "method", 21, 24),  # the receiver type is the scope
        ("sample.Server.listen", "method", 26, 28),
    ],
    "sample.rs": [
        ("sample.Stack", "class", 5, 7),
        ("sample.Op", "class", 9, 12),
        ("sample.Describe", "interface", 14, 16),
        ("sample.Stack.new", "method", 19, 21),  # the impl block is the scope
        ("sample.Stack.push", "method", 23, 25),
        ("sample.Stack.describe", "method", 29, 31),
        ("sample.build", "function", 34, 38),
        ("sample.square", "macro", 40, 44),
        ("sample.inner", "module", 46, 48),
        ("sample.inner.helper", "function", 47, 47),
    ],
}

# (from, to, kind) — references that must be found (a subset: builtins and
# types are also reported, and are not the point here).
EXPECTED_REFS: dict[str, set[tuple[str, str, str]]] = {
    "sample.py": {
        ("sample", "path", "import"),
        ("sample", "OrderedDict", "import"),
        ("sample.helper", "join", "member-call"),
        ("sample.Shape", "Base", "class"),
        ("sample.Shape.area", "helper", "call"),
        ("sample.Shape.name~2", "Ordered", "call"),
        ("sample.outer.inner", "Shape", "call"),
        ("sample.outer", "inner", "call"),
    },
    "sample.js": {
        ("sample", "readFile", "import"),
        ("sample", "Default", "import"),
        ("sample.Dog", "Animal", "class"),
        ("sample.Dog.bark", "repeat", "call"),
        ("sample.makeDog", "Dog", "class"),
    },
    "sample.ts": {
        ("sample", "Logger", "import"),
        ("sample.Circle", "Shape", "implementation"),
        ("sample.Circle.area", "square", "call"),
        ("sample.describe", "Shape", "type"),
        ("sample.describe", "Logger", "type"),
        ("sample.describe", "area", "member-call"),
    },
    "sample.tsx": {
        ("sample", "useState", "import"),
        ("sample.Button", "Props", "type"),
        ("sample.Button", "useState", "call"),
        ("sample.Panel.render", "Button", "call"),  # <Button /> renders the component
    },
    "sample.go": {
        ("sample", "fmt", "import"),
        ("sample", "http", "import"),
        ("sample.NewServer", "Server", "type"),
        ("sample.Server.Start", "Println", "member-call"),
        ("sample.Server.Start", "listen", "member-call"),
        ("sample.Handler", "ResponseWriter", "member-type"),
    },
    "sample.rs": {
        ("sample", "HashMap", "import"),
        ("sample", "Debug", "import"),
        ("sample", "Display", "import"),
        ("sample", "Describe", "implementation"),
        ("sample.build", "new", "member-call"),  # Stack::new()
        ("sample.build", "push", "member-call"),
        ("sample.Stack.push", "push", "member-call"),
    },
}


def parse_fixture(name: str) -> ParsedFile:
    return parse_source((FIXTURES / name).read_bytes(), name)


@pytest.mark.parametrize("name", sorted(EXPECTED_SYMBOLS))
def test_fixture_symbols(name: str) -> None:
    parsed = parse_fixture(name)
    got = [(s.qualified_name, s.kind, s.start_line, s.end_line) for s in parsed.symbols]
    assert got == EXPECTED_SYMBOLS[name]
    assert not parsed.has_errors


@pytest.mark.parametrize("name", sorted(EXPECTED_REFS))
def test_fixture_references(name: str) -> None:
    parsed = parse_fixture(name)
    got = {(r.from_name, r.to_name, r.kind) for r in parsed.references}
    missing = EXPECTED_REFS[name] - got
    assert not missing, f"not found: {sorted(missing)}"


def test_a_definition_name_is_not_a_reference_to_itself() -> None:
    # Go's tags.scm marks every type_identifier as a reference, the one naming
    # `type Server struct` included.
    parsed = parse_fixture("sample.go")
    assert ("sample", "Server", "type") not in {
        (r.from_name, r.to_name, r.kind) for r in parsed.references
    }
    assert not any(
        r.from_name == "sample.Server" and r.to_name == "Server" for r in parsed.references
    )


def test_every_language_has_a_fixture_and_every_fixture_a_language() -> None:
    fixtures = {p.name for p in FIXTURES.iterdir()}
    for spec in LANGUAGES:
        assert any(f.endswith(spec.extensions) for f in fixtures), f"no fixture for {spec.name}"
    for f in fixtures:
        assert language_for_path(f) is not None, f"{f} has no language"
    assert set(EXPECTED_SYMBOLS) == fixtures


def test_every_grammar_loads() -> None:
    status = grammar_status()
    assert [g.language for g in status] == [s.name for s in LANGUAGES]
    assert all(g.ok for g in status), [g.detail for g in status if not g.ok]


def test_signature_is_the_definition_up_to_its_body() -> None:
    src = b"@decorator\ndef f(\n    a: int,\n    b: str = 'x',\n) -> None:\n    return None\n"
    (sym,) = parse_source(src, "m.py").symbols
    assert sym.signature == "def f(\n    a: int,\n    b: str = 'x',\n) -> None:"
    assert (sym.start_line, sym.end_line) == (1, 6)


def test_symbol_hash_follows_the_text_not_the_position() -> None:
    a = parse_source(b"def f():\n    return 1\n", "m.py").symbols[0]
    moved = parse_source(b"\n\n\ndef f():\n    return 1\n", "m.py").symbols[0]
    changed = parse_source(b"def f():\n    return 2\n", "m.py").symbols[0]
    assert a.symbol_hash == moved.symbol_hash
    assert a.symbol_hash != changed.symbol_hash
    assert moved.start_line == 4


def test_syntax_errors_are_reported_and_still_parsed() -> None:
    parsed = parse_source(b"def ok():\n    pass\n\ndef broken(:\n", "m.py")
    assert parsed.has_errors
    assert "m.ok" in [s.qualified_name for s in parsed.symbols]


@pytest.mark.parametrize(
    ("path", "module"),
    [
        ("pkg/sub/mod.py", "pkg.sub.mod"),
        ("pkg/__init__.py", "pkg"),
        ("__init__.py", "__init__"),
        ("web/src/index.ts", "web.src"),
        ("src/net/mod.rs", "src.net"),
        ("cmd/server/main.go", "cmd.server.main"),
        ("a/b.test.js", "a.b.test"),
    ],
)
def test_module_name_from_path(path: str, module: str) -> None:
    assert module_name(path, language_for_path(path)) == module


def test_a_file_without_a_grammar_is_refused() -> None:
    with pytest.raises(LedgerError, match="no grammar"):
        parse_source(b"hello", "README.md")
