"""A bounded, time-limited set of message ids: the first line against replays and gossip echoes."""

from __future__ import annotations

from collections import OrderedDict


class SeenCache:
    """Remembers ids for `ttl` seconds, at most `capacity` of them (oldest evicted first).

    Time is passed in (sans-IO). Insertion order is time order because `now` never goes backwards
    for one peer, so expiry pops from the front.
    """

    def __init__(self, capacity: int = 65536, ttl: float = 600.0) -> None:
        if capacity <= 0 or ttl <= 0:
            raise ValueError("capacity and ttl must be positive")
        self.capacity = capacity
        self.ttl = ttl
        self._entries: OrderedDict[bytes, float] = OrderedDict()
        self._first = float("inf")  # the first (oldest) entry's time: nothing expires before it does

    def add(self, msg_id: bytes, now: float) -> bool:
        """Record `msg_id`; True if it was new (not seen within the ttl)."""
        if self._first <= now - self.ttl:
            self.expire(now)
        entries = self._entries
        if msg_id in entries:
            return False
        if not entries:
            self._first = now
        entries[msg_id] = now
        if len(entries) > self.capacity:
            while len(entries) > self.capacity:
                entries.popitem(last=False)
            self._first = next(iter(entries.values()))
        return True

    def __contains__(self, msg_id: bytes) -> bool:
        return msg_id in self._entries

    def expire(self, now: float) -> None:
        cutoff = now - self.ttl
        entries = self._entries
        while entries:
            first_id, seen_at = next(iter(entries.items()))
            if seen_at > cutoff:
                self._first = seen_at
                return
            del entries[first_id]
        self._first = float("inf")

    def __len__(self) -> int:
        return len(self._entries)
