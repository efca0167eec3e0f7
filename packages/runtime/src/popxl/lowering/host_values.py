"""The host values of a Session's variables, and their custody while the devices hold them alone.

While a Session is attached (with `weights_to_host_on_exit`), the devices hold
the variables' values alone: `hand_over` drops the host copies and lends each
variable to the `HostValues`, through which the variable reads its value from
the Session when asked; `take_back` gives the variables their host values again
once the Session has read them back. Memory-mapped values stay in their maps.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from popxl import dtypes
from popxl.lowering import fit
from popxl.tensor import Tensor, Variable

Array = np.ndarray[Any, Any]


class HostValues:
    """The host value of each variable of a Session's program, or None where the devices hold it alone.

    Host values are replaced, never written in place (but for a memory-mapped one, written into its map), so
    they start as the variables' own data. `read` gives a variable's current value from the Session, which it
    holds weakly, as the variables hold this.
    """

    def __init__(self, variables: Iterable[Variable], read: Callable[[Tensor], Array]) -> None:
        self._values: dict[Variable, Array | None] = {v: v.host_data for v in variables}
        self._read = weakref.WeakMethod(read)
        # Whether the devices have moved past the host values (a run since they were last read or written).
        self.stale = False

    def read(self, variable: Variable) -> Array:
        """The current value of `variable`, which the devices hold, read through the Session."""
        read = self._read()
        assert read is not None  # the Session holds this, and the variables hold this weakly
        return read(variable)

    def value(self, variable: Variable) -> Array | None:
        """The host value of `variable`, None while the devices hold it alone."""
        return self._values[variable]

    def held(self) -> dict[Variable, Array]:
        """The host values held here (all of them while detached)."""
        return {v: a for v, a in self._values.items() if a is not None}

    def missing(self) -> list[Variable]:
        """The variables whose values the devices hold alone."""
        return [v for v, held in self._values.items() if held is None]

    def lends(self, variable: Variable) -> bool:
        """Whether `variable`'s host value goes while the devices hold it (a memory-mapped one stays in its map)."""
        return not isinstance(self._values[variable], np.memmap)

    def hand_over(self, variables: Iterable[Variable] | None = None) -> None:
        """Drop the host copies of the values the devices now hold (of `variables`, or all), so that the state
        is held once while attached (on a CPU, host and device memory are one): each is read from the devices
        when asked for, and read back whole when the Session detaches."""
        for v in self._values if variables is None else variables:
            if self._values[v] is not None and self.lends(v):
                self._values[v] = None
                v.hand_over(self)

    def holds_alone(self) -> bool:
        """Whether the devices hold the variables' values alone (see `hand_over`)."""
        return any(v.held_by(self) for v in self._values)

    def hand_over_again(self) -> None:
        """Where the devices hold the values alone, drop the host copies made since (read back or written)."""
        if self.holds_alone():
            self.hand_over()

    def replace(self, values: Mapping[Variable, Array]) -> None:
        """Replace host values; a memory-mapped one is written into its map, which is flushed."""
        for var, value in values.items():
            held = self._values[var]
            if isinstance(held, np.memmap):
                held[...] = value
                held.flush()
            else:
                self._values[var] = value

    def read_back(self, values: Mapping[Variable, Array]) -> None:
        """Replace host values by values read from the devices (float8 as host arrays hold it)."""
        self.replace({v: dtypes.host_view(a) for v, a in values.items()})

    def take_back(self, variables: Iterable[Variable] | None = None) -> None:
        """Give the variables handed over (of `variables`, or all) their host values again."""
        for v in self._values if variables is None else variables:
            if v.held_by(self):
                held = self._values[v]
                assert held is not None
                v.take_back(held)


class Handing:
    """Host values on their way to the devices at attach (a `Handover`): each value goes as soon as it is
    placed, so that attaching never holds the whole state twice."""

    # Freed values under glibc's mmap threshold stay in the heap, where the larger arrays placed next cannot
    # reuse them: they are given back to the OS every this many bytes.
    GIVE_BACK_EVERY = 64 * 2**20

    def __init__(self, host: HostValues, values: dict[Variable, Array]) -> None:
        self.host = host
        self.values = values
        self.released = 0

    def releases(self, variable: Variable) -> bool:
        """Whether the host value of `variable` goes once it is placed."""
        return self.host.lends(variable)

    def placed(self, variables: list[Variable]) -> None:
        """These variables' values are on the devices: their host values go."""
        for v in variables:
            value = self.values.pop(v, None)
            if value is not None and self.releases(v):
                self.released += value.nbytes
        self.host.hand_over(variables)
        if self.released >= self.GIVE_BACK_EVERY:
            fit.give_back_freed_memory()
            self.released = 0

    def restore(self, values: dict[Variable, Array]) -> None:
        """Placing failed: the variables get back the values read from the devices."""
        self.host.read_back(values)
        self.host.take_back(values)
