"""The operator's terminal UI (`swarm-node tui`): panels over a running node's status snapshot.

Modules: `client` polls the control API in a thread, `model` turns snapshots into rows (pure, every
field optional), `chart` draws reward per version in text, `app` is the Textual app.
"""

from __future__ import annotations

from pathlib import Path


def run_tui(data_dirs: list[Path], interval: float = 1.0) -> int:
    """Run the app in this terminal until `q`; textual is imported only here."""
    from node.tui.app import run_tui as run
    return run(data_dirs, interval=interval)
