"""A picture of serialised schedules: a panel per case and io_mode, a lane per loop and kind of work."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from popxl_addons.harness.schedule import LANES, Event

Panels = Mapping[tuple[str, str], Mapping[str, Sequence[Event]]]

NOTE = (
    "Execution order, not a measured timeline: each box is one step's loads, compute or stores, "
    "numbered by step; hatched boxes are placed on IO tiles. A GPU timeline would show io_overlapped's "
    "transfers beside the compute."
)


def _draw(ax: Axes, loops: Mapping[str, Sequence[Event]]) -> None:
    cmap = plt.get_cmap("tab10")
    labels: list[str] = []
    offset = 0
    for loop, events in loops.items():
        order = sorted({e.position for e in events})
        slot = {p: offset + i for i, p in enumerate(order)}
        for e in events:
            y = -(len(labels) + LANES.index(e.lane))
            hatch = "///" if e.tile_set == "io" else None
            ax.barh(y, 0.9, left=slot[e.position], color=cmap(e.step % 10), edgecolor="black", lw=0.5, hatch=hatch)
            box = {"facecolor": "white", "edgecolor": "none", "pad": 1}
            ax.text(slot[e.position] + 0.45, y, str(e.step), ha="center", va="center", fontsize=8, bbox=box)
        labels.extend(f"{loop} {lane}" if len(loops) > 1 else lane for lane in LANES)
        offset += len(order) + 1
    ax.set_yticks([-i for i in range(len(labels))], labels, fontsize=8)
    ax.set_xlim(-0.2, max(offset - 1, 1) + 0.1)
    ax.set_xticks([])
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def plot_schedules(panels: Panels, path: str | Path) -> None:
    """Write a PNG with one panel per (case, io_mode): the forward loop and, for gradient cases, the backward."""
    cases = list(dict.fromkeys(case for case, _ in panels))
    modes = list(dict.fromkeys(mode for _, mode in panels))
    heights = [max(len(panels[(c, m)]) for m in modes if (c, m) in panels) for c in cases]
    fig, axes = plt.subplots(
        len(cases),
        len(modes),
        figsize=(5.2 * len(modes), sum(1.1 * h + 0.7 for h in heights) + 0.8),
        squeeze=False,
        gridspec_kw={"height_ratios": heights},
    )
    for row, case in enumerate(cases):
        for col, mode in enumerate(modes):
            ax = axes[row, col]
            if (case, mode) not in panels:
                ax.set_axis_off()
                ax.set_title(f"{case}: {mode} not run", fontsize=9, loc="left")
                continue
            _draw(ax, panels[(case, mode)])
            ax.set_title(f"{case}: io_mode {mode!r}", fontsize=9, loc="left")
    fig.suptitle("Serialised schedules, from each case's own serialised graph", fontsize=11)
    fig.text(0.01, 0.005, NOTE, fontsize=8, wrap=True)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
