"""Our own stalls: a silence we slept through is not evidence against anyone.

A node that stops running for a while (a swapping or overloaded machine, a suspended laptop or VM, a
long pause in the process) wakes to a backlog: messages queued in its sockets arrive late and in
bursts, copies of one message are validated together, and every timer is overdue. Judged as if it had
been running all along, the backlog reads as misconduct by the peers that delivered it (late messages,
duplicates) and as silence by every peer it did not hear from (neighbours gone, the active trainer
silent, so a standby takes over from a live trainer). All of it is the sleeper's own doing.

The core's timers are how a stall shows: the runtime wakes the core at `next_deadline()`, and a
periodic timer (the sweep) keeps that deadline at most a second or two ahead, so an input that comes
more than `STALL_AFTER` seconds after the deadline means the node was not running. From then on:

- silence is counted from the moment we woke (`awake_since`), so neighbours and the head trainer get
  their full allowance to be heard again before they are judged gone;
- refusals for lateness (`duplicate`, `out-of-window`, `stale`, and `unknown-commitment`: a verdict
  about a commitment dropped while catching up) cost the sender nothing until
  the backlog has had time to drain (`excused`: the stall's length again, plus `EXCUSE_AFTER`); they are
  still refused and counted. So are pieces that holders announced before the stall and no longer
  hold (`withheld`): the backlog names versions they have since let go.

The simulator wakes each core exactly on time, so it never sees a stall unless a scenario makes one.
"""

from __future__ import annotations

STALL_AFTER = 5.0  # seconds past a timer's deadline that only a node not running explains
EXCUSE_AFTER = 30.0  # seconds after waking (beyond the stall's own length) the backlog may take
NEVER = float("-inf")


class StallWatch:
    def __init__(self, after: float = STALL_AFTER, excuse_after: float = EXCUSE_AFTER) -> None:
        self.after, self.excuse_after = after, excuse_after
        self.awake_since = NEVER  # when we last woke from a stall
        self.excused_until = NEVER
        self.stalls = 0
        self.longest = 0.0
        self.last = 0.0
        self._overdue = None  # the deadline our last stall was measured against

    def observe(self, now: float, due: float | None) -> float | None:
        """Called before each input with the core's earliest deadline: the stall's length when `now` is
        too far past it (the node was not running), else None."""
        if due is None or now - due <= self.after or due == self._overdue:
            return None  # on time; or the same stall, seen again by an input before the timers caught up
        self._overdue = due
        late = now - due
        self.stalls += 1
        self.last, self.longest = late, max(self.longest, late)
        self.awake_since = now
        self.excused_until = max(self.excused_until, now + late + self.excuse_after)
        return late

    def excused(self, now: float) -> bool:
        """Whether lateness is still ours to explain (refusals for it cost the sender nothing)."""
        return now < self.excused_until

    def snapshot(self) -> dict:
        return {"stalls": self.stalls, "longest_s": round(self.longest, 3), "last_s": round(self.last, 3),
                "awake_since": None if self.awake_since == NEVER else round(self.awake_since, 3)}
