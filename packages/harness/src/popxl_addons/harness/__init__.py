"""popxl-addons harness: generated normal-vs-serialised equivalence checks."""

from popxl_addons.harness.builtin import BUILTIN_CASES
from popxl_addons.harness.cases import LOADS, STORES, Case, Layout, Variant
from popxl_addons.harness.equivalence import Outcome, TensorReport, check

__all__ = ["BUILTIN_CASES", "LOADS", "STORES", "Case", "Layout", "Outcome", "TensorReport", "Variant", "check"]
