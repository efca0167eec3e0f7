"""The built-in matrix: every generated variant of the built-in cases, through the pytest plugin."""

from popxl_addons.harness import BUILTIN_CASES

HARNESS_CASES = BUILTIN_CASES
