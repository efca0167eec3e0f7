"""The disk tier's read-ahead schedule: which entries a run will load next, from the run before it.

A run's loads and stores are recorded, and the next run, whose program is the
same, reads ahead along that record. A first run guesses each buffer's next
entry from its last step (phased programs walk layers in order, then back).
"""

from __future__ import annotations

from collections.abc import Callable

# An entry: (remote buffer id, index).
Key = tuple[int, int]
# How far along the recorded loads reads may start, in loads.
LOOKAHEAD = 64


class ReadAheadSchedule:
    """The loads and stores of the last run, and where the current run is along them."""

    def __init__(self) -> None:
        # The run's loads and stores in order, ("load" or "store", key): the last run's is the schedule.
        self._schedule: list[tuple[str, Key]] = []
        self._position = 0
        self._recorded: list[tuple[str, Key]] = []
        self._last_load: Key | None = None
        self._last: dict[int, int] = {}
        self._step: dict[int, int] = {}

    def begin_run(self) -> None:
        """A run starts: its loads and stores are recorded from the start of the last run's."""
        self._recorded = []
        self._position = 0
        self._last_load = None

    def end_run(self) -> None:
        """A run ended: what it recorded (if anything) is the next run's schedule."""
        if self._recorded:
            self._schedule = self._recorded

    def record(self, kind: str, key: Key) -> None:
        """The program's "load" or "store" of entry `key`, in the order it asks."""
        self._recorded.append((kind, key))
        if kind == "load":
            bid, index = key
            if bid in self._last and index != self._last[bid]:
                self._step[bid] = index - self._last[bid]
            self._last[bid] = index
            self._last_load = key
        schedule = self._schedule
        if self._position < len(schedule) and schedule[self._position] == (kind, key):
            self._position += 1
            return
        window = schedule[self._position : self._position + 4 * LOOKAHEAD]
        if (kind, key) in window:
            self._position += window.index((kind, key)) + 1

    def upcoming(self, entries: Callable[[int], int]) -> list[Key]:
        """The next loads, along the schedule: those of entries no store comes before (a read of one would be
        given up). Without a schedule, the guess from the last load (`entries` gives a buffer's entries)."""
        if self._schedule:
            stored: set[Key] = set()
            loads: list[Key] = []
            for kind, key in self._schedule[self._position : self._position + 4 * LOOKAHEAD]:
                if kind == "store":
                    stored.add(key)
                elif key not in stored and key not in loads:
                    loads.append(key)
                    if len(loads) == LOOKAHEAD:
                        break
            return loads
        if not self._recorded or self._last_load is None:
            return []
        bid, index = self._last_load
        guess = index + self._step.get(bid, 1)
        return [(bid, guess)] if 0 <= guess < entries(bid) else []
