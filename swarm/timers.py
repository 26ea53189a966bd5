"""Named deadlines: the core asks to be woken (`next_deadline`) instead of sleeping itself."""

from __future__ import annotations


class Timers:
    """The earliest deadline is cached: the runtime asks for it after every input."""

    def __init__(self) -> None:
        self._due: dict[str, float] = {}
        self._next: float | None = None  # min(self._due.values()), or None when unknown or empty

    def set(self, name: str, at: float) -> None:
        due = self._due
        old = due.get(name)
        due[name] = at
        nxt = self._next
        if nxt is not None:
            if old is not None and old == nxt and at > nxt:
                self._next = None  # the earliest may have moved later: recompute when asked
            elif at < nxt:
                self._next = at

    def cancel(self, name: str) -> None:
        at = self._due.pop(name, None)
        if at is not None and at == self._next:
            self._next = None

    def due(self, name: str) -> float | None:
        """When `name` is due (None: not set)."""
        return self._due.get(name)

    def __contains__(self, name: str) -> bool:
        return name in self._due

    def next_deadline(self) -> float | None:
        if self._next is None and self._due:
            self._next = min(self._due.values())
        return self._next

    def pop_due(self, now: float) -> list[str]:
        """Names whose deadline has passed, earliest first (ties by name: deterministic)."""
        due = sorted((at, name) for name, at in self._due.items() if at <= now)
        for _, name in due:
            del self._due[name]
        if due:
            self._next = None
        return [name for _, name in due]
