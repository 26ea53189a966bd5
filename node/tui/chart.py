"""Reward (or loss, accuracy) per policy version drawn with block characters.

Why text and not an image: the TUI must work over SSH in any terminal, and the same rendering goes
into docs/tui.txt. One column per version (the newest that fit), eighth-height blocks, y labels on the
left and the version numbers under the first and last column.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from node.tui.model import num

BLOCKS = " ▁▂▃▄▅▆▇█"


def sparkline(values: list[float], width: int = 24) -> str:
    """One line of eighth blocks for the last `width` values (empty string for no values)."""
    values = [v for v in values if num(v) is not None][-width:]
    if not values:
        return ""
    lo, hi = min(values), max(values)
    span = hi - lo
    return "".join(BLOCKS[4] if span == 0 else BLOCKS[1 + round((v - lo) / span * 7)] for v in values)


def bar_chart(points: list[tuple[int, float]], width: int, height: int = 10, label: str = "reward") -> list[str]:
    """Lines of a column chart of (version, value); the newest points that fit in `width`."""
    if not points:
        return [f"no {label} yet: the chart fills in as the trainer publishes versions"]
    gutter = 9
    points = points[-max(1, width - gutter - 1):]
    values = [v for _, v in points]
    lo, hi = min(values), max(values)
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    eighths = [round((v - lo) / (hi - lo) * height * 8) for v in values]
    lines = []
    for row in range(height):
        level = (height - 1 - row) * 8
        axis = f"{hi:8.3f} " if row == 0 else f"{lo:8.3f} " if row == height - 1 else " " * gutter
        cells = "".join(BLOCKS[8] if e >= level + 8 else BLOCKS[e - level] if e > level else " " for e in eighths)
        lines.append(axis + "│" + cells)
    lines.append(" " * gutter + "└" + "─" * len(points))
    first, last = f"v{points[0][0]}", f"v{points[-1][0]}"
    pad = max(1, len(points) - len(first) - len(last))  # the last label ends under the last column
    lines.append(" " * (gutter + 1) + (first + " " * pad + last if len(points) > 1 else first))
    return lines


class RewardChart(Static):
    """Shows one metric of one task's history; the app picks which (keys `m` and `t`)."""

    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.series: dict[str, list[dict]] = {}
        self.chart_task: str | None = None
        self.metric = "reward"

    def show(self, series: dict[str, list[dict]], task: str | None, metric: str) -> None:
        self.series, self.chart_task, self.metric = series, task, metric
        self.refresh(layout=True)

    def render(self) -> Text:
        records = self.series.get(self.chart_task or "", [])
        points = [(int(h["version"]), float(h[self.metric])) for h in records if num(h.get(self.metric)) is not None]
        width = max(20, self.size.width or 80)
        title = f"{self.metric} per policy version, task {str(self.chart_task or '-')[:12]}  ({len(points)} versions)"
        lines = [title, ""] + bar_chart(points, width, label=self.metric)
        if records:
            last = records[-1]
            best = max(points, key=lambda p: p[1]) if points else None
            extra = "  ".join(f"{k} {last[k]}" for k in sorted(last) if k not in ("task_id", "version")
                              and num(last[k]) is not None)
            lines += ["", f"latest v{last['version']}: {extra}"]
            if best is not None:
                lines.append(f"best {self.metric} {best[1]:.4g} at v{best[0]}")
        return Text("\n".join(lines))
