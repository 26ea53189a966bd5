"""Deterministic discrete-event simulator driving real `PeerCore`s on a virtual network.

One seed drives every random choice (network, churn, faults, adversaries, the cores' own seeds), time
is virtual, and there are no threads: the same scenario and seed always produce the same trace and the
same `trace_hash`. Entry points: `simulator.run.run_scenario` and the `swarm-sim` CLI.
"""
