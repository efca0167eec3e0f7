"""Graph rewrites applied before aliasing, as popxl-addons runs them."""

from __future__ import annotations

from enum import Enum

import popxl
from popxl_addons.core.modules.autodiff_patterns import apply_op_to_identity

__all__ = ["apply_pre_alias_patterns", "patterns_level", "PatternsLevel"]


class PatternsLevel(Enum):
    """popart's pattern levels (`popart.PatternsLevel`): how many of its graph rewrites to run."""

    NoPatterns = 0
    Minimal = 1
    Default = 2
    All = 3


# popxl-addons' names of the levels, as `apply_pre_alias_patterns` takes them.
patterns_level: dict[str, PatternsLevel] = {
    "no_patterns": PatternsLevel.NoPatterns,
    "minimal": PatternsLevel.Minimal,
    "default": PatternsLevel.Default,
    "all": PatternsLevel.All,
}


def apply_pre_alias_patterns(ir: popxl.Ir, level: str = "default") -> None:
    """Run the pre-alias patterns of `level` on every graph of `ir`.

    The 'default' and 'all' levels include the op-to-identity rewrite, which the
    ops of `popxl_addons.collectives` need before a Session can be created.
    """
    if level not in patterns_level:
        raise ValueError(f"Unknown pattern level {level!r}: expected one of {list(patterns_level)}")
    if patterns_level[level] in (PatternsLevel.Default, PatternsLevel.All):
        apply_op_to_identity(ir.graphs)
