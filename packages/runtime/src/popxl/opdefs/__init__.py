"""The op registry's definitions, one module per op family.

Importing this package registers every built-in op kind. JAX appears here
and in `popxl.lowering` only: these modules hold the op kinds' lowerings.
"""

from popxl.opdefs import (  # noqa: F401
    call,
    collectives,
    conv,
    debug,
    elementwise,
    float8,
    indexing,
    io,
    linalg,
    losses,
    random,
    reduce,
    resample,
    scatter,
    shape,
    var_updates,
)
