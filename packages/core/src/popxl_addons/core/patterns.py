"""Graph rewrites applied before aliasing, as popxl-addons runs them."""

from __future__ import annotations

from collections.abc import Iterable

import popxl
from popxl.extension import identity_candidates, replace_with_identity

LEVELS = ("no_patterns", "minimal", "default", "all")


def apply_op_to_identity(graphs: Iterable[popxl.Graph]) -> int:
    """Replace every identity-replaceable op of `graphs` by an identity; returns how many."""
    count = 0
    for g in graphs:
        for op in identity_candidates(g):
            replace_with_identity(op)
            count += 1
    return count


def apply_pre_alias_patterns(ir: popxl.Ir, level: str = "default") -> None:
    """Run the pre-alias patterns of `level` on every graph of `ir`.

    The 'default' and 'all' levels include the op-to-identity rewrite, which the
    ops of `popxl_addons.collectives` need before a Session can be created.
    """
    if level not in LEVELS:
        raise ValueError(f"Unknown pattern level {level!r}: expected one of {LEVELS}")
    if level in ("default", "all"):
        apply_op_to_identity(ir.graphs)
