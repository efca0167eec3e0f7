"""Each distribution installed alone from the built wheels, as a user would: import it, run and type-check a program.

`nox -s install_alone` builds dist/ first and runs this file. Every distribution gets a fresh virtual
environment in a temporary folder, outside the repository, into which `uv pip install --find-links dist
<name>` installs it: its sibling distributions come from dist/, everything else from the package index.
The distributions installed must be exactly the ones it needs, its import must come from the environment,
and a small program using its API (tests_dist/downstream/) must run and pass `mypy --strict` against the
installed packages and their py.typed markers. One more test installs with pip itself, the README's
command.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DIST = Path(os.environ.get("POPXL_DIST_DIR", ROOT / "dist")).resolve()
DOWNSTREAM = Path(__file__).resolve().parent / "downstream"

# distribution -> (its import, the sibling distributions it must pull in, the downstream program)
DISTRIBUTIONS = {
    "popxl-xla": ("popxl", [], "runtime"),
    "popxl-addons": ("popxl_addons", ["popxl-xla"], "addons"),
    "popxl-addons-harness": ("popxl_addons.harness", ["popxl-xla", "popxl-addons"], "harness"),
}
TYPECHECKER = "mypy>=1.10"


def _run(cmd: list[str | Path], cwd: Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "MYPYPATH")}
    env["JAX_PLATFORMS"] = "cpu"
    result = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, (
        f"{' '.join(map(str, cmd))} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    )
    return result


def _wheels() -> list[Path]:
    wheels = sorted(DIST.glob("*.whl"))
    if not wheels:
        message = f"no wheels in {DIST}: run `nox -s build` first"
        if "POPXL_DIST_DIR" in os.environ:
            pytest.fail(message)
        pytest.skip(message)
    return wheels


def _venv(where: Path, seed: bool = False) -> Path:
    venv = where / "venv"
    _run(
        [
            sys.executable,
            "-m",
            "uv",
            "venv",
            "--quiet",
            "--python",
            sys.executable,
            *(["--seed"] if seed else []),
            venv,
        ],
        where,
    )
    return venv / "bin" / "python"


def _ours_installed(python: Path, where: Path) -> set[str]:
    script = (
        "import importlib.metadata as m; "
        f"names = {sorted(DISTRIBUTIONS)!r}; "
        "print(' '.join(d.metadata['Name'] for d in m.distributions() if d.metadata['Name'] in names))"
    )
    return set(_run([python, "-I", "-c", script], where).stdout.split())


def _check(name: str, python: Path, where: Path) -> None:
    module, siblings, program = DISTRIBUTIONS[name]
    assert _ours_installed(python, where) == {name, *siblings}
    # The import comes from the environment, not from the repository.
    found = _run([python, "-I", "-c", f"import {module}; print({module}.__file__)"], where).stdout.strip()
    assert Path(found).is_relative_to(where / "venv"), found
    version = _run([python, "-I", "-c", f"import importlib.metadata as m; print(m.version({name!r}))"], where)
    assert version.stdout.strip() == (ROOT / "VERSION").read_text().strip()
    source = where / f"downstream_{program}.py"
    source.write_text((DOWNSTREAM / f"{program}.py").read_text())
    _run([python, "-I", source.name], where)
    _run([python, "-I", "-m", "mypy", "--strict", "--no-incremental", source.name], where)


@pytest.mark.parametrize("name", sorted(DISTRIBUTIONS))
def test_installs_alone_and_type_checks(name: str, tmp_path: Path) -> None:
    _wheels()
    python = _venv(tmp_path)
    uv_pip = [sys.executable, "-m", "uv", "pip", "install", "--quiet", "--python", python]
    # uv's cache keeps an earlier build of the same version of ours; this build's wheels must be the ones installed.
    refresh = [arg for ours in DISTRIBUTIONS for arg in ("--refresh-package", ours)]
    _run([*uv_pip, *refresh, "--find-links", DIST, name, TYPECHECKER], tmp_path)
    _check(name, python, tmp_path)


def test_pip_installs_addons_alone(tmp_path: Path) -> None:
    """The README's command with pip itself, for popxl-addons (which needs popxl-xla)."""
    _wheels()
    python = _venv(tmp_path, seed=True)
    _run([python, "-m", "pip", "install", "--quiet", "--find-links", DIST, "popxl-addons", TYPECHECKER], tmp_path)
    _check("popxl-addons", python, tmp_path)


def test_each_distribution_has_a_wheel_and_an_sdist() -> None:
    wheels = _wheels()
    version = (ROOT / "VERSION").read_text().strip()
    for name in DISTRIBUTIONS:
        stem = f"{name.replace('-', '_')}-{version}"
        assert (DIST / f"{stem}.tar.gz").is_file(), stem
        (wheel,) = [w for w in wheels if w.name.startswith(f"{stem}-py3-none-any")]
        # PEP 561: the wheel marks each of its packages as typed.
        package = DISTRIBUTIONS[name][0].replace(".", "/")
        assert f"{package}/py.typed" in zipfile.ZipFile(wheel).namelist(), wheel.name
