"""The built-in matrix: every generated variant of the built-in cases, through the pytest plugin (slow: the
quick subset in test_builtin_cases_quick.py runs by default)."""

import pytest

from popxl_addons.harness import BUILTIN_CASES

pytestmark = pytest.mark.slow

HARNESS_CASES = BUILTIN_CASES
