"""Every built-in case at one size, through the pytest plugin: each io_mode, store, load, layout and placement
the case has, at its smallest step count that io_overlapped runs at (2 or more) and one row; the case whose
stores differ (scale) at its most rows, where the stores' row offsets differ. The whole matrix, every size, is
test_builtin_cases.py (slow)."""

import dataclasses

from popxl_addons.harness import BUILTIN_CASES, Case


def _one_size(case: Case) -> Case:
    steps = min((s for s in case.steps if s >= 2), default=max(case.steps))
    rows = max(case.rows) if len(case.stores) > 1 else min(case.rows)
    return dataclasses.replace(case, steps=(steps,), rows=(rows,))


HARNESS_CASES = [_one_size(case) for case in BUILTIN_CASES]
