"""pytest plugin: a module-level `HARNESS_CASES` list becomes one test item per variant.

    from popxl_addons.harness import Case
    HARNESS_CASES = [Case("mine", lambda layout: MyModule(), (4, 8), grad=True)]

collects items such as `mine[io_overlapped-steps4-rows2]`; each builds and runs
both programs and fails with a per-tensor report. Works with pytest-xdist.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from popxl_addons.harness.cases import Case, Variant
from popxl_addons.harness.document import variant_record
from popxl_addons.harness.equivalence import check

# Fields of a variant's JSON record that each item reports as a user property.
PROPERTIES = ("id", "verdict", "max_abs_diff", "max_rel_diff")


class HarnessMismatchError(Exception):
    """A variant whose serialised program did not match its normal program."""


class HarnessItem(pytest.Item):
    """One variant of a harness case."""

    def __init__(self, *, variant: Variant, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.variant = variant

    def runtest(self) -> None:
        """Check the variant (skipped, with its reason, when it cannot run as asked)."""
        if self.variant.skip_reason is not None:
            pytest.skip(self.variant.skip_reason)
        outcome = check(self.variant)
        # As the JSON report names them, for --junitxml and other reporters.
        record = variant_record(outcome)
        self.user_properties.extend((k, record[k]) for k in PROPERTIES if record[k] is not None)
        if not outcome.passed:
            raise HarnessMismatchError(outcome.report())

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        """The per-tensor report for harness failures."""
        if isinstance(excinfo.value, HarnessMismatchError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Any, int, str]:
        """Where the item comes from, for pytest's reports."""
        return self.path, 0, self.variant.id


def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> list[HarnessItem] | None:
    """Turn a module's `HARNESS_CASES` into one item per variant."""
    if name != "HARNESS_CASES" or not isinstance(collector, pytest.Module):
        return None
    cases: Iterable[Any] = obj if isinstance(obj, list | tuple) else []
    items = []
    for case in cases:
        if not isinstance(case, Case):
            raise TypeError(f"HARNESS_CASES in {collector.path} must hold harness Cases, got {case!r}")
        for variant in case.variants():
            items.append(HarnessItem.from_parent(collector, name=variant.id, variant=variant))
    return items
