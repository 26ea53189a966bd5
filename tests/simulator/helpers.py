"""Small scenarios built in code for the simulator tests."""

from __future__ import annotations

from simulator.scenario import loads

BASE = """
name = "{name}"
duration = {duration}
seed = {seed}
settle = {settle}
checks = {checks}
"""


def tiny(name: str = "tiny", duration: float = 120, seed: int = 1, settle: float = 30, checks=(), extra: str = "",
         peers: int = 6, up: float = 100, down: float = 100):
    text = BASE.format(name=name, duration=duration, seed=seed, settle=settle,
                       checks="[" + ", ".join(f'"{c}"' for c in checks) + "]")
    text += f"""
[[peers]]
name = "peer"
count = {peers}
up_mbps = {up}
down_mbps = {down}
"""
    return loads(text + extra, f"<{name}>")
