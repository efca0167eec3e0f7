"""poprun and MPI: on one host with Open MPI the instances are the ranks of one MPI job; without it they
start as before, and poprun says so once."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from popdist import _env, _mpi, launcher

POPRUN = [sys.executable, "-m", "popdist.launcher"]
# Bounded for a loaded machine: nothing here may hang.
TIMEOUT_S = 240
NOTICE = "poprun: starting the instances without MPI ({}): they are not MPI ranks"

MPIRUN, WHY_NOT = _mpi.find_mpirun()
HAS_MPI4PY = importlib.util.find_spec("mpi4py") is not None
INSTALL = "apt-get install openmpi-bin libopenmpi-dev; pip install mpi4py"
needs_mpirun = pytest.mark.skipif(MPIRUN is None, reason=f"needs Open MPI's mpirun ({WHY_NOT}): {INSTALL}")
needs_mpi4py = pytest.mark.skipif(not HAS_MPI4PY, reason=f"needs mpi4py (not importable): {INSTALL}")


def _clean_env(**changes: str) -> dict[str, str]:
    # Neither a launch's variables nor an MPI job's (as if the suite itself ran under mpirun).
    dropped = {*_env.ALL, _mpi.MODE_VARIABLE, "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"}
    return {**{k: v for k, v in os.environ.items() if k not in dropped}, **changes}


def _program(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "prog.py"
    path.write_text(textwrap.dedent(text))
    return path


def _poprun(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*POPRUN, *args], capture_output=True, text=True, timeout=TIMEOUT_S, env=env or _clean_env(), check=False
    )


# Instance 1 writes a line in two pieces and fails; instance 0 waits to be stopped.
FAILING = """
    import os, sys, time
    import popdist
    index = popdist.getInstanceIndex()
    print("index", index, "mpi rank", os.environ.get("OMPI_COMM_WORLD_RANK"), flush=True)
    if index == 1:
        sys.stdout.write("half a ")
        sys.stdout.flush()
        time.sleep(0.2)
        print("line", flush=True)
        sys.exit(3)
    time.sleep(120)
"""


@pytest.mark.slow
@needs_mpirun
@needs_mpi4py
def test_instances_are_the_ranks_of_one_mpi_job(tmp_path: Path) -> None:
    prog = _program(
        tmp_path,
        """
        import numpy as np
        from mpi4py import MPI
        import popdist

        comm = MPI.COMM_WORLD
        index, count = popdist.getInstanceIndex(), popdist.getNumInstances()
        assert (comm.Get_rank(), comm.Get_size()) == (index, count), (comm.Get_rank(), comm.Get_size())
        assert comm.bcast({"from": "root"} if index == 0 else None, root=0) == {"from": "root"}
        rows = np.full(3, index, np.float32)
        comm.Bcast(rows, root=1)  # as GPT-J's tests_serial do: a root other than 0 is another instance
        assert (rows == 1).all()
        popdist.init()  # and JAX's distributed runtime joins the same instances
        import jax

        assert (jax.process_index(), jax.process_count()) == (index, count)
        print(f"rank {comm.Get_rank()} of {comm.Get_size()}, jax process {jax.process_index()}", flush=True)
        """,
    )
    result = _poprun("--num-instances", "2", "--num-replicas", "2", "--init-timeout", "200", sys.executable, str(prog))
    assert result.returncode == 0, result.stdout + result.stderr
    for i in range(2):
        assert f"[1,{i}]<stdout>:rank {i} of 2, jax process {i}" in result.stdout.splitlines()
    assert "without MPI" not in result.stderr


@pytest.mark.slow
@needs_mpirun
def test_through_mpirun_instances_find_programs_on_poprun_s_path(tmp_path: Path) -> None:
    # mpirun puts its own folder first on its ranks' PATH; an instance must still run the `python3` that
    # poprun's caller would (a virtual environment's, say), not the system's.
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "python3").symlink_to(sys.executable)
    env = _clean_env(PATH=f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
    done = _poprun("--mpi", "on", "--num-instances", "2", "sh", "-c", "command -v python3", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    found = [line.split(":", 1)[1] for line in done.stdout.splitlines() if "<stdout>:" in line]
    assert found == [str(folder / "python3")] * 2, done.stdout


@pytest.mark.slow
@needs_mpirun
def test_through_mpirun_a_failing_instance_stops_the_others(tmp_path: Path) -> None:
    # poprun, not mpirun, tags the lines (mpirun tags each piece), names the first failure and passes on its code.
    prog = _program(tmp_path, FAILING)
    result = _poprun(
        "--mpi", "on", "--num-instances", "2", "--only-output-from-instance", "0", sys.executable, str(prog)
    )
    assert result.returncode == 3, result.stdout + result.stderr
    assert "[1,0]<stdout>:index 0 mpi rank 0" in result.stdout.splitlines()
    assert "[1,1]<stdout>:index 1 mpi rank 1" in result.stderr.splitlines()  # hidden, shown on failure
    assert "[1,1]<stdout>:half a line" in result.stderr.splitlines()
    assert result.stderr.splitlines()[-1] == "poprun: instance 1 exited with code 3; stopped the other instances"
    assert "without MPI" not in result.stderr


def test_without_mpi_poprun_says_so_once_and_runs_as_before(tmp_path: Path) -> None:
    prog = _program(tmp_path, FAILING)
    # No mpirun on PATH (the program is named by its full path).
    empty = tmp_path / "bin"
    empty.mkdir()
    result = _poprun("--num-instances", "2", sys.executable, str(prog), env=_clean_env(PATH=str(empty)))
    assert result.returncode == 3, result.stdout + result.stderr
    assert result.stderr.splitlines().count(NOTICE.format("no mpirun on PATH")) == 1
    assert "[1,0]<stdout>:index 0 mpi rank None" in result.stdout.splitlines()
    assert "[1,1]<stdout>:half a line" in result.stdout.splitlines()
    assert result.stderr.splitlines()[-1] == "poprun: instance 1 exited with code 3; stopped the other instances"

    ok = _program(
        tmp_path, "import os, popdist; print(popdist.getInstanceIndex(), 'OMPI_COMM_WORLD_RANK' in os.environ)"
    )
    for option, env, reason in [
        (["--mpi", "off"], _clean_env(), "--mpi off"),
        ([], _clean_env(**{_mpi.MODE_VARIABLE: "off"}), f"{_mpi.MODE_VARIABLE}=off"),
    ]:
        result = _poprun(*option, "--num-instances", "2", sys.executable, str(ok), env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        assert sorted(result.stdout.splitlines()) == ["[1,0]<stdout>:0 False", "[1,1]<stdout>:1 False"]
        assert result.stderr.splitlines() == [NOTICE.format(reason)]


def test_mpi_on_is_refused_where_it_cannot_be(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", _mpi.MODE_VARIABLE):
        monkeypatch.delenv(name, raising=False)
    several_hosts = ["--num-hosts", "2", "--host-index", "0", "--coordinator-address", "127.0.0.1:1"]
    monkeypatch.setenv("PATH", str(tmp_path))
    for argv, message in [
        (["--mpi", "on", "prog"], "--mpi on, but no mpirun on PATH"),
        (["--mpi", "on", *several_hosts, "prog"], "--mpi on, but a launch over 2 hosts; poprun uses MPI on one host"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            launcher.main(argv)
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err
    monkeypatch.setenv(_mpi.MODE_VARIABLE, "sometimes")
    with pytest.raises(SystemExit):
        launcher.main(["prog"])
    assert f"{_mpi.MODE_VARIABLE}='sometimes' is none of auto, on, off" in capsys.readouterr().err


def test_mpirun_command_line() -> None:
    line = _mpi.command(_mpi.Mpirun("/usr/bin/mpirun", 4), 3, ["prog", "-x"], True, "--report-bindings", None)
    assert line[:3] == ["/usr/bin/mpirun", "-np", "3"]
    # Unbound (XLA's threads use every core), as many instances as asked whatever the cores, quiet.
    assert {"--oversubscribe", "--quiet", "--report-bindings"} <= set(line)
    assert line[line.index("--bind-to") + 1] == "none"
    assert ("--allow-run-as-root" in line) == (os.geteuid() == 0)
    assert line[-5:] == [sys.executable, "-m", "popdist._rank", "prog", "-x"]
    newer = _mpi.command(_mpi.Mpirun("mpirun", 5), 1, ["prog"], False, None, None)
    assert "--oversubscribe" not in newer and newer[newer.index("--map-by") + 1] == ":OVERSUBSCRIBE"
    # Open MPI 5's mpirun refuses --quiet (exit 213), quiet or not.
    assert "--quiet" not in _mpi.command(_mpi.Mpirun("mpirun", 5), 1, ["prog"], True, None, None)


# An mpirun that answers `--version` as Open MPI 5's does, refuses what Open MPI 5.0's refuses (--quiet,
# --oversubscribe) with its exit code, and otherwise starts the rank processes itself as MPI ranks.
FAKE_MPIRUN_5 = """\
#!{python}
import os, subprocess, sys
args = sys.argv[1:]
with open(os.environ["FAKE_MPIRUN_LOG"], "a") as log:
    log.write(repr(args) + "\\n")
if args == ["--version"]:
    print("mpirun (Open MPI) 5.0.3\\n\\nReport bugs to https://www.open-mpi.org/community/help/")
    sys.exit(0)
for refused in ("--quiet", "--oversubscribe"):
    if refused in args:
        print(f"prterun: Error: unrecognized option \\"{{refused}}\\"", file=sys.stderr)
        sys.exit(213)
ranks = int(args[args.index("-np") + 1])
program = args[args.index("popdist._rank") - 2:]
procs = [
    subprocess.Popen(program, env={{**os.environ, "OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_SIZE": str(ranks)}})
    for r in range(ranks)
]
codes = [p.wait() for p in procs]
sys.exit(next((c for c in codes if c), 0))
"""


def test_open_mpi_5_gets_only_options_it_takes(tmp_path: Path) -> None:
    folder = tmp_path / "bin"
    folder.mkdir()
    fake = folder / "mpirun"
    fake.write_text(FAKE_MPIRUN_5.format(python=sys.executable))
    fake.chmod(0o755)
    log = tmp_path / "mpirun.log"
    env = _clean_env(PATH=f"{folder}{os.pathsep}{os.environ.get('PATH', '')}", FAKE_MPIRUN_LOG=str(log))
    prog = _program(
        tmp_path, "import os, popdist; print(popdist.getInstanceIndex(), os.environ['OMPI_COMM_WORLD_RANK'])"
    )
    result = _poprun("--mpi", "on", "--num-instances", "2", sys.executable, str(prog), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(result.stdout.splitlines()) == ["[1,0]<stdout>:0 0", "[1,1]<stdout>:1 1"]
    calls = log.read_text().splitlines()
    assert calls[0] == repr(["--version"]) and "--quiet" not in calls[1], calls
