"""Gossipsub mesh control: GRAFT, PRUNE with backoff, filling a mesh up to D and the heartbeat's repair.

A part of `GossipRouter` (simulator/gossip_model.py), which owns the per-peer state these methods
read and change. A mixin, not an object of its own, because the hot paths keep plain attribute
access on one object and every call stays in the order that makes the trace byte-identical.
"""

from __future__ import annotations

from simulator.gossip_types import CONTROL_BYTES


class MeshControl:
    """Keeps each peer's mesh per topic within [Dlo, Dhi]; GRAFT/PRUNE take effect at both ends at once."""

    def _graft(self, i: int, j: int, topic: str) -> None:
        now = self.loop.now
        self._link_changed(i, j)
        self.net.frame(now, i, j, CONTROL_BYTES)
        self.control_frames += 1
        if topic not in self.subs[j] or self.backoff[j].get((topic, i), 0.0) > now:
            self.net.frame(now, j, i, CONTROL_BYTES)  # PRUNE back
            self.backoff[i][(topic, j)] = now + self.cfg.prune_backoff
            return
        self.mesh[i].setdefault(topic, set()).add(j)
        theirs = self.mesh[j].setdefault(topic, set())
        theirs.add(i)
        if len(theirs) > self.cfg.Dhi:
            self.dirty[j] = True
            self._activate(j)

    def _prune(self, i: int, j: int, topic: str) -> None:
        now = self.loop.now
        self._link_changed(i, j)
        self.net.frame(now, i, j, CONTROL_BYTES)
        self.control_frames += 1
        self.mesh[i].get(topic, set()).discard(j)
        theirs = self.mesh[j].get(topic)
        if theirs is not None and i in theirs:
            theirs.discard(i)
            if len(theirs) < self.cfg.Dlo:
                self.dirty[j] = True
                self._activate(j)
        self.backoff[i][(topic, j)] = now + self.cfg.prune_backoff
        self.backoff[j][(topic, i)] = now + self.cfg.prune_backoff

    def _fill(self, i: int, topic: str, want: int) -> None:
        now = self.loop.now
        mesh = self.mesh[i].setdefault(topic, set())
        backoff = self.backoff[i]
        candidates = [j for j in sorted(self.conns[i]) if j not in mesh and topic in self.subs[j]
                      and backoff.get((topic, j), 0.0) <= now]
        for j in self.rng.sample(candidates, want - len(mesh)):
            self._graft(i, j, topic)

    def _maintain(self, i: int) -> bool:
        """Heartbeat mesh repair; True while the peer still lacks Dlo mesh peers somewhere."""
        cfg = self.cfg
        short = False
        self.eligible[i].clear()
        for topic in sorted(self.subs[i]):
            mesh = self.mesh[i].setdefault(topic, set())
            for j in sorted(mesh):
                if j not in self.conns[i] or topic not in self.subs[j]:
                    mesh.discard(j)
            if len(mesh) < cfg.Dlo:
                self._fill(i, topic, cfg.D)
                short = short or len(mesh) < cfg.Dlo
            elif len(mesh) > cfg.Dhi:
                for j in self.rng.sample(sorted(mesh), len(mesh) - cfg.D):
                    self._prune(i, j, topic)
        if self.backoff[i]:
            now = self.loop.now
            self.backoff[i] = {k: v for k, v in self.backoff[i].items() if v > now}
        return short

