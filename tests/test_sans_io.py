"""The rule that keeps the simulator honest: swarm/ and gossip/ do no I/O of their own."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
FORBIDDEN = {"trio", "libp2p", "torch", "time", "random", "socket", "threading", "asyncio", "os"}
ALLOWED_FIRST_PARTY = {"swarm": {"gossip", "swarm"}, "gossip": {"gossip"}}


def imported_modules(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "__import__":
            names.add("<dynamic>")
    return names


@pytest.mark.parametrize("package", ["swarm", "gossip"])
def test_no_io_imports(package):
    files = sorted((ROOT / package).rglob("*.py"))
    assert files
    first_party = {"swarm", "gossip", "node", "trainer", "proofs", "simulator"}
    for path in files:
        names = imported_modules(path)
        assert not names & FORBIDDEN, f"{path.relative_to(ROOT)} imports {sorted(names & FORBIDDEN)}"
        assert "<dynamic>" not in names, f"{path.relative_to(ROOT)} uses __import__"
        bad = (names & first_party) - ALLOWED_FIRST_PARTY[package]
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}: layers import downwards only"


def test_checker_catches_a_violation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import time\nfrom random import choice\n")
    assert {"time", "random"} <= imported_modules(bad)
