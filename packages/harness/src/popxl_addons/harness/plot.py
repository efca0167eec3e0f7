"""A picture of serialised schedules: load, compute and store lanes per step, one panel per io_mode."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from popxl_addons.harness.schedule import LANES, Event


def plot_schedules(schedules: Mapping[str, Sequence[Event]], path: str | Path, title: str) -> None:
    """Write a PNG with one timeline panel per io_mode."""
    fig, axes = plt.subplots(len(schedules), 1, figsize=(11, 1.9 * len(schedules) + 0.8), squeeze=False)
    cmap = plt.get_cmap("tab10")
    for ax, (mode, events) in zip(axes[:, 0], schedules.items()):
        order = sorted({e.position for e in events})
        slot = {p: i for i, p in enumerate(order)}
        for e in events:
            y = len(LANES) - 1 - LANES.index(e.lane)
            hatch = "///" if e.tile_set == "io" else None
            ax.barh(
                y, 0.9, left=slot[e.position], color=cmap(e.step % 10), edgecolor="black", linewidth=0.5, hatch=hatch
            )
            label_box = {"facecolor": "white", "edgecolor": "none", "pad": 1}
            ax.text(slot[e.position] + 0.45, y, f"{e.step}", ha="center", va="center", fontsize=9, bbox=label_box)
        ax.set_yticks(range(len(LANES)), list(reversed(LANES)))
        ax.set_xlim(-0.2, len(order) + 0.1)
        ax.set_xticks([])
        ax.set_title(f"io_mode = {mode!r}", fontsize=10, loc="left")
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    axes[-1, 0].set_xlabel(
        "execution order: each box is one step's transfers or compute; hatched boxes run on IO tiles"
    )
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
