"""popxl's engine caching as JAX's persistent compilation cache.

popart saves a compiled executable under `cachePath` when `enableEngineCaching`
is set (popxl sets both from `POPXL_CACHE_DIR` or `POPART_CACHE_DIR` when an Ir
is made) and loads it, instead of compiling, for the same program. Here the
executables are XLA's, cached by JAX in that folder: its key hashes the
optimised program, the compile options, the device kind and the JAX and XLA
versions, so a changed program never reuses a stale entry. Every executable is
cached, however fast its compile (popart caches every engine). JAX keeps one
cache folder per process: a Session with another `cachePath` moves it there.
"""

from __future__ import annotations

import os

import jax
from jax.experimental.compilation_cache import compilation_cache

CACHE_VARIABLES = ("POPXL_CACHE_DIR", "POPART_CACHE_DIR")


def cache_dir_from_environment() -> str:
    """The engine cache folder the environment names (POPXL_CACHE_DIR, else POPART_CACHE_DIR), or ""."""
    return next((os.environ[v] for v in CACHE_VARIABLES if os.environ.get(v)), "")


def use_engine_cache(enabled: bool, path: str) -> None:
    """Cache this process's executables in `path` when `enabled` (popxl's enableEngineCaching and cachePath)."""
    if not enabled or not path:
        return
    folder = os.path.abspath(os.path.expanduser(path))
    if getattr(jax.config, "jax_compilation_cache_dir", None) != folder:
        compilation_cache.reset_cache()
        jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
