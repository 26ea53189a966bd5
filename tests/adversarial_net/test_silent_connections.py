"""Issue 20 item 5: 300 silent TCP connections from one address must not lock out new peers.

The attacker (silent_sockets.py, its own process) opens 300 plain TCP connections to the victim from
127.0.0.1, never sends a byte, and re-opens each one a second after the victim closes it, so 300 are
held or being re-opened for the whole attack. Meanwhile a *new* honest peer (a fresh py-libp2p host, a fresh peer id) dials the victim
every half second and asks it a /swarm/sync/1 question, and an already-connected peer polls status.

The honest peer also dials from 127.0.0.1, so the per-address bound cannot tell it from the attacker:
both are "one source". What makes room is behaviour. The honest dialer speaks at once
(multistream-select), so its handshake is never the one evicted while a silent socket is pending:
a newcomer over the per-address bound of unfinished handshakes evicts the oldest *silent* one
(conngate.ConnGate.admit). Sockets that stay silent anyway are closed at the 5 s handshake deadline.
The victim therefore holds at most ``max_pending_per_ip`` (16) of the attacker's sockets at a time,
which bounds its file descriptors.

Asserted: every honest dial during the attack succeeds and is answered, status answers within 2 s
throughout, the existing link survives, the victim's fd count stays under FD_BOUND and its RSS under
RSS_GROWTH_MB over its start, and after the attack its fds are back near the start (time to recover).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import trio

from ..node_p2p.helpers import open_hosts
from .attack import status
from .conftest import ROOT, stop

SYNC = "/swarm/sync/1"
ATTACK_SOCKETS = 300
HONEST_DIALS = 10
FD_BOUND = 160  # victim's open fds during the attack; without the gate it holds one per attacker socket
RSS_GROWTH_MB = 48


async def honest_dial(addr: str, victim_id: str, i: int) -> float:
    """A new peer dials and gets a request answered; returns the seconds it took."""
    start = trio.current_time()
    async with open_hosts(1, f"newcomer-{i}") as (peer,):
        await peer.connect(addr, timeout=6)
        answer = await peer.request(victim_id, SYNC, b"task ids", timeout=3)
        assert answer == b"ok:task ids", answer
    return trio.current_time() - start


async def test_silent_connections_do_not_lock_out_new_peers(victim):
    addr, victim_id, proc = victim
    parts = addr.split("/")
    ip, port = parts[2], int(parts[4])
    with trio.fail_after(120):
        async with open_hosts(1, "watcher") as (watcher,):
            await watcher.connect(addr)  # an existing link: must survive the attack
            before = await status(watcher, victim_id)
            attacker = subprocess.Popen(
                [sys.executable, "-m", "tests.adversarial_net.silent_sockets", ip, str(port), str(ATTACK_SOCKETS)],
                cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE, text=True)
            times, failures, peak_fds, peak_rss = [], [], 0, 0
            try:
                with trio.fail_after(30):
                    ready = await trio.to_thread.run_sync(attacker.stdout.readline, abandon_on_cancel=True)
                assert ready.strip() == "ready", ready
                attack_start = trio.current_time()
                for i in range(HONEST_DIALS):
                    try:
                        times.append(await honest_dial(addr, victim_id, i))
                    except Exception as exc:  # noqa: BLE001 - counted, asserted below
                        failures.append(repr(exc))
                    st = await status(watcher, victim_id)  # within 2 s, or the test fails
                    peak_fds, peak_rss = max(peak_fds, st["fds"]), max(peak_rss, st["rss_kb"]["VmRSS"])
                    await trio.sleep(0.5)
                attack_s = trio.current_time() - attack_start
            finally:
                stop(attacker)
            counts = json.loads(attacker.stdout.read().strip().splitlines()[-1])
            stopped = trio.current_time()
            while (st := await status(watcher, victim_id))["fds"] > before["fds"] + 8:
                assert trio.current_time() - stopped < 10, st
                await trio.sleep(0.2)
            recover_s = trio.current_time() - stopped
            refused = st["stats"]["connections_refused"]
            ok, times = len(times), sorted(times)
            print(f"item 5: honest dials succeeded {ok}/{HONEST_DIALS} (median {times[ok // 2] if times else 0:.2f}s, "
                  f"slowest {times[-1] if times else 0:.2f}s) during "
                  f"{attack_s:.1f}s of {ATTACK_SOCKETS} silent sockets (attacker: {counts}); victim fds "
                  f"peak {peak_fds} (start {before['fds']}), RSS peak {peak_rss / 1024:.0f} MB (start "
                  f"{before['rss_kb']['VmRSS'] / 1024:.0f} MB); fds back in {recover_s:.2f}s; refused {refused}")
            assert ok == HONEST_DIALS, failures
            assert watcher.peer_id in st["connected"]
            assert peak_fds < FD_BOUND, peak_fds
            assert (peak_rss - before["rss_kb"]["VmRSS"]) / 1024 < RSS_GROWTH_MB
            assert refused.get("evicted_pending_per_ip", 0) >= ATTACK_SOCKETS - 16, refused
    assert proc.poll() is None
