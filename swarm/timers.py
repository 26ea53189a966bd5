"""Named deadlines: the core asks to be woken (`next_deadline`) instead of sleeping itself."""

from __future__ import annotations


class Timers:
    def __init__(self) -> None:
        self._due: dict[str, float] = {}

    def set(self, name: str, at: float) -> None:
        self._due[name] = at

    def cancel(self, name: str) -> None:
        self._due.pop(name, None)

    def __contains__(self, name: str) -> bool:
        return name in self._due

    def next_deadline(self) -> float | None:
        return min(self._due.values()) if self._due else None

    def pop_due(self, now: float) -> list[str]:
        """Names whose deadline has passed, earliest first (ties by name: deterministic)."""
        due = sorted((at, name) for name, at in self._due.items() if at <= now)
        for _, name in due:
            del self._due[name]
        return [name for _, name in due]
