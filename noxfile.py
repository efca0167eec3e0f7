"""Sessions for the monorepo: per-package tests, type checks and lint, the demo and benchmarks, and the
distributions, docs site and notebook as users get them (build, install_alone, docs, notebook)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import nox
from packaging.tags import sys_tags
from packaging.utils import parse_wheel_filename

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["tests", "typecheck", "lint"]

# Dependency order: a package's siblings are installed from their folders alongside it.
PACKAGES = {
    "runtime": ("popxl", []),
    "addons": ("popxl_addons", ["runtime"]),
    "harness": ("popxl_addons.harness", ["runtime", "addons"]),
}
# What mypy checks where it is more than the import name: the runtime ships `popart` and `popdist` too.
TYPECHECK = {
    "runtime": ["popxl", "popart", "popdist"],
}
TEST_DEPS = ["pytest>=8", "pytest-xdist>=3", "hypothesis>=6"]
# What `nox -s bench` runs, in order.
BENCHMARKS = [
    "build_scaling",
    "compile_scaling",
    "replication",
    "batch_serialisation",
    "planner",
    "gpt_phased",
    "gpt_scale",
]
# The examples run on every package, and the phased example's data ships with scikit-learn.
EXAMPLE_DEPS = ["scikit-learn>=1.3"]
# The GPT example's model, which its script, the examples' tests and the benchmarks import: the project in
# examples/, installed editable (no distribution ships it).
EXAMPLES_PROJECT = ["-e", "examples"]


def _torch(session: nox.Session) -> None:
    """Install PyTorch for the tests that check against it: a local wheel where one is found, else PyPI's."""
    # Wheel folders are named by the environment (pip's and uv's own variables), never by this file; a
    # session's interpreter is the one running nox, so its tags say which wheels install.
    folders = [Path(f) for var in ("UV_FIND_LINKS", "PIP_FIND_LINKS") for f in os.environ.get(var, "").split()]
    supported = set(sys_tags())
    for wheel in sorted(w for f in folders if f.is_dir() for w in f.glob("torch-*.whl")):
        _, version, _, tags = parse_wheel_filename(wheel.name)
        if supported & tags:
            session.install(f"torch=={version}", "--find-links", str(wheel.parent))
            return
    session.install("torch>=2.1")


def _install(session: nox.Session, package: str) -> None:
    _, siblings = PACKAGES[package]
    paths = [f"packages/{p}" for p in [*siblings, package]]
    session.install(*[arg for p in paths for arg in ("-e", p)])


def _marked(paths: list[str], mark: str) -> bool:
    """Whether a test file under `paths` uses `mark`, read as text (collecting imports JAX: a minute on 2 cores)."""
    return any(f"mark.{mark}" in f.read_text() for p in paths for f in Path(p).rglob("*.py"))


def _tests(session: nox.Session, package: str, marks: str) -> None:
    """One package's tests selected by `marks`, with remote buffers in host memory (the default); then those also
    marked `placement` (they depend on where remote buffers, remote variables and host stream data live) again
    with them in device memory. The harness checks both placements in every variant already.

    Every package has tests that are not slow: collecting none of those fails (pytest's exit code 5) as
    something broken. A package with no test marked slow skips `tests_slow`, and one with no placement test the
    rerun; where the marks are used, a selection of them may still be empty (slow and placement), which passes."""
    paths = {"examples": ["examples/tests", "benchmarks/tests"], "tools": ["tools/tests"]}.get(
        package, [f"packages/{package}/tests"]
    )
    if marks == "slow" and not _marked(paths, "slow"):
        session.skip(f"no test of {package} is marked slow")
    if package == "examples":
        _install(session, "harness")
        # The examples' and benchmarks' own tests: every documented option of each script runs at a small size.
        session.install(*TEST_DEPS, *EXAMPLE_DEPS, *EXAMPLES_PROJECT)
    elif package == "tools":  # the tools read every package (the harness's install brings the others)
        _install(session, "harness")
        session.install(*TEST_DEPS)
    else:
        _install(session, package)
        session.install(*TEST_DEPS)
        if package == "runtime" and shutil.which("mpirun"):  # poprun's MPI tests: mpi4py over the host's Open MPI
            session.install("mpi4py>=3.1")
        if package == "addons":  # tests check against torch: the local CPU wheel, no CUDA
            _torch(session)
    pytest = ["pytest", *paths, "-q", "-n", "2"]  # arguments after `--` come last: a `-m` there overrides ours
    session.run(*pytest, "-m", marks, *session.posargs, success_codes=[0] if marks == "not slow" else [0, 5])
    if package not in ("harness", "examples") and _marked(paths, "placement"):
        env = {"POPXL_REMOTE_MEMORY": "device"}
        placed = f"placement and ({marks})"
        session.run(*pytest, "-m", placed, *session.posargs, env=env, success_codes=[0, 5])


@nox.session
@nox.parametrize("package", [*PACKAGES, "examples", "tools"])
def tests(session: nox.Session, package: str) -> None:
    """One package's tests, all but those marked slow (`nox -s tests_slow` runs those)."""
    _tests(session, package, "not slow")


@nox.session
@nox.parametrize("package", [*PACKAGES, "examples", "tools"])
def tests_slow(session: nox.Session, package: str) -> None:
    """One package's slow tests: other processes started (poprun, memory limits), memory measured, timeouts waited
    out, the harness's whole built-in matrix, the examples' training comparisons and the larger benchmark runs."""
    _tests(session, package, "slow")


@nox.session
@nox.parametrize("package", list(PACKAGES))
def typecheck(session: nox.Session, package: str) -> None:
    """mypy --strict on one package's sources."""
    _install(session, package)
    session.install("mypy>=1.10", "pytest>=8")
    targets = TYPECHECK.get(package, [PACKAGES[package][0]])
    session.run("mypy", *[arg for t in targets for arg in ("-p", t)])


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over every package, the benchmarks, the examples, the tools and this file."""
    session.install("ruff>=0.5")
    session.run("ruff", "check", "packages", "benchmarks", "examples", "tools", "noxfile.py")
    session.run("ruff", "format", "--check", "packages", "benchmarks", "examples", "tools", "noxfile.py")


@nox.session
def op_table(session: nox.Session) -> None:
    """docs/ops.md written again from the op registry, by tools/op_table.py (the tools' tests check it is current)."""
    _install(session, "runtime")
    with Path("docs/ops.md").open("w") as out:
        session.run("python", "-m", "tools.op_table", stdout=out, stderr=None)


@nox.session
def shells(session: nox.Session) -> None:
    """popxl-addons' re-export modules and core/__init__.py written again from the path table, by tools/shells.py."""
    _install(session, "addons")
    session.run("python", "-m", "tools.shells")


@nox.session
def demo(session: nox.Session) -> None:
    """The main job: the harness report over its built-in normal-vs-serialised cases.

    Arguments after `--` are added to the report flags, e.g. `nox -s demo -- --cases scale`.
    """
    _install(session, "harness")
    reports = ["--json", "out/harness.json", "--html", "out/harness.html", "--plot", "out/schedule.png"]
    session.run("popxl-addons-harness", *reports, *session.posargs)


@nox.session
def example(session: nox.Session) -> None:
    """The phased-training examples: a digits classifier and a tensor-parallel GPT, each against un-phased."""
    _install(session, "harness")
    session.install(*EXAMPLE_DEPS, *EXAMPLES_PROJECT)
    session.run("python", "examples/phased_training.py", *session.posargs)
    session.run("python", "examples/gpt_phased.py")


@nox.session
def bench(session: nox.Session) -> None:
    """Every benchmark; figures go to the untracked out/bench/."""
    _install(session, "harness")
    session.install(*EXAMPLES_PROJECT)
    for script in BENCHMARKS:
        session.run("python", f"benchmarks/{script}.py", *session.posargs)


# The distributions as users install them: wheels and sdists of every package in one find-links folder.
DIST = Path("dist")


def _build(session: nox.Session) -> None:
    """A wheel and an sdist of every package into dist/ (emptied first), each wheel built from its sdist."""
    shutil.rmtree(DIST, ignore_errors=True)
    for package in PACKAGES:
        # uv is beside nox (CI and the README install them together); `python -m uv` finds it from nox's interpreter.
        session.run(
            sys.executable, "-m", "uv", "build", "--quiet", "--out-dir", str(DIST), f"packages/{package}", external=True
        )


@nox.session(venv_backend="none")
def build(session: nox.Session) -> None:
    """Wheels and sdists of the three distributions into dist/, at the version in VERSION."""
    _build(session)
    session.log("built: " + ", ".join(sorted(p.name for p in DIST.iterdir())))


@nox.session
def install_alone(session: nox.Session) -> None:
    """Each distribution installed alone from dist/ in a fresh venv: imported, run and type-checked (mypy --strict)."""
    _build(session)
    session.install("pytest>=8", "pytest-xdist>=3", "uv")
    env = {"POPXL_DIST_DIR": str(DIST.resolve())}
    session.run("pytest", "tests_dist/test_install_alone.py", "-q", "-n", "2", *session.posargs, env=env)


DOCS_DEPS = [
    "mkdocs>=1.6,<2",
    "mkdocstrings[python]>=0.26",
    "mkdocs-material>=9.5",
    "mkdocs-jupyter>=0.25",
    "ruff>=0.5",  # formats the signatures
]


@nox.session
def docs(session: nox.Session) -> None:
    """The guides' code blocks run as tests, then the docs site into site/ (mkdocs --strict: a broken link fails).

    The API pages are read from the installed wheels of dist/, where `popxl_addons` holds every sub-package.
    """
    _build(session)
    session.install("--find-links", str(DIST), "popxl-addons-harness", "pytest>=8", *DOCS_DEPS)
    # This build's wheels even where a reused environment holds an earlier build of the same version.
    session.install("--no-deps", "--force-reinstall", *[str(w) for w in sorted(DIST.glob("*.whl"))])
    session.run("pytest", "tests_dist/test_guides.py", "-q", "-rs", *session.posargs)
    session.run("mkdocs", "build", "--strict", env={"NO_MKDOCS_2_WARNING": "1"})


@nox.session
def notebook(session: nox.Session) -> None:
    """examples/batch_serialisation.ipynb run from top to bottom; `-- --write` saves its outputs into it."""
    _build(session)
    write = "--write" in session.posargs
    args = [a for a in session.posargs if a != "--write"]
    session.install("--find-links", str(DIST), "popxl-addons-harness", "pytest>=8", "nbclient>=0.10", "ipykernel>=6")
    session.install("--no-deps", "--force-reinstall", *[str(w) for w in sorted(DIST.glob("*.whl"))])
    env = {"NOTEBOOK_WRITE": "1" if write else "0"}
    session.run("pytest", "tests_dist/test_notebook.py", "-q", "-s", *args, env=env)
