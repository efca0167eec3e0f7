"""popxl's engine caching: POPXL_CACHE_DIR and the session options put executables in JAX's persistent cache."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.experimental.compilation_cache import compilation_cache

import popxl
from popxl import ops


@pytest.fixture
def restore_jax_cache() -> Iterator[None]:
    """JAX's cache settings are per process: put them back for the tests that follow."""
    saved = {
        k: getattr(jax.config, k) for k in ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs")
    }
    yield
    compilation_cache.reset_cache()
    for key, value in saved.items():
        jax.config.update(key, value)


@pytest.mark.parametrize("variable", ["POPXL_CACHE_DIR", "POPART_CACHE_DIR"])
def test_the_environment_turns_engine_caching_on(variable: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POPXL_CACHE_DIR", raising=False)
    monkeypatch.delenv("POPART_CACHE_DIR", raising=False)
    assert not popxl.Ir()._pb_ir.getSessionOptions().enableEngineCaching
    monkeypatch.setenv(variable, "PATH_TO_CACHE")
    options = popxl.Ir()._pb_ir.getSessionOptions()
    assert options.enableEngineCaching
    assert options.cachePath == "PATH_TO_CACHE"


def _run(path: Path, scale: float) -> np.ndarray:
    ir = popxl.Ir()
    options = ir._pb_ir.getSessionOptions()
    options.enableEngineCaching = True
    options.cachePath = str(path)
    with ir.main_graph:
        x = popxl.h2d_stream((8, 8), popxl.float32, name="x")
        y = popxl.d2h_stream((8, 8), popxl.float32, name="y")
        ops.host_store(y, ops.gelu(ops.host_load(x) * scale))
    with popxl.Session(ir, "cpu") as session:
        out: np.ndarray = session.run({x: np.ones((8, 8), np.float32)})[y]
    return out


@pytest.mark.usefixtures("restore_jax_cache")
def test_executables_are_cached_and_a_changed_program_gets_its_own(tmp_path: Path) -> None:
    first = _run(tmp_path, 2.0)
    cached = sorted(p.name for p in tmp_path.iterdir())
    assert cached, "nothing was cached"
    again = _run(tmp_path, 2.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == cached  # the same program: read, not written again
    np.testing.assert_array_equal(again, first)  # the same executable on the same input
    _run(tmp_path, 3.0)
    assert len(list(tmp_path.iterdir())) > len(cached)  # another constant: another program, another entry
