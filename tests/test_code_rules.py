"""Rules that keep the code enterable (docs/architecture.md): small files, and no module leaning on
another's private names, so a module's underscore names can change without breaking a caller."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROJECT = ("swarm", "gossip", "proofs", "trainer", "node", "simulator", "bench", "scripts", "tests")
FIRST_PARTY = {"swarm", "gossip", "proofs", "trainer", "node", "simulator", "bench", "tests"}
SIZE_CAPPED = ("swarm", "node", "simulator", "trainer")
MAX_LINES = 450
README_MAX_LINES = 150


def project_files(folders) -> list[pathlib.Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def private_imports(path: pathlib.Path) -> list[str]:
    """`from first_party.module import _name` and `first_party_module._name`, with their line."""
    tree = ast.parse(path.read_text(), filename=str(path))
    modules: set[str] = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] not in FIRST_PARTY:
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{node.lineno}: from {node.module} import {alias.name}")
                modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules |= {(a.asname or a.name).split(".")[0] for a in node.names
                        if a.name.split(".")[0] in FIRST_PARTY}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_module_imports_a_private_name_of_another():
    bad = {str(p.relative_to(ROOT)): found for p in project_files(PROJECT) if (found := private_imports(p))}
    assert not bad, f"private names used across modules (make them public or move them): {bad}"


def test_the_private_import_check_catches_both_forms(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from gossip.envelope import _secret\nimport proofs.sampling as sampling\nsampling._x(1)\n"
                   "from os import _exit\n")
    assert private_imports(bad) == ["1: from gossip.envelope import _secret", "3: sampling._x"]


def test_no_file_over_the_size_cap():
    big = {str(p.relative_to(ROOT)): n for p in project_files(SIZE_CAPPED)
           if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not big, f"files over {MAX_LINES} lines (split them along their seams): {big}"


def test_readme_stays_a_short_entry_point():
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: reference material belongs in docs/"
