"""The memory check counts what XLA's figures leave out and every limit the process runs under.

Each test reproduces a probe that the check once let through to a kill by the OS or an allocation failure.
Programs that would allocate much are only ever run in a subprocess under a lowered RLIMIT_AS, so that a
check that lets them through ends in a failed allocation, never in tens of GiB taken for real.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

import popxl
from popxl import ops
from popxl.lowering import fit, memory

WORKER = Path(__file__).with_name("memory_worker.py")
GiB = 1 << 30
MiB = 1 << 20


def _worker(*args: str, limit: int = resource.RLIMIT_AS, nbytes: int = 3 * GiB) -> subprocess.CompletedProcess[str]:
    """The worker in a process of its own whose `limit` (RLIMIT_AS, RLIMIT_DATA) is set to `nbytes` first."""
    env = {k: v for k, v in os.environ.items() if k != fit.CHECK_VARIABLE and not k.startswith("POPDIST_")}
    start = (
        "import resource, runpy, sys; "
        f"resource.setrlimit({limit}, ({nbytes}, {nbytes})); "
        f"sys.argv = {[str(WORKER), *args]!r}; "
        f"runpy.run_path({str(WORKER)!r}, run_name='__main__')"
    )
    return subprocess.run(
        [sys.executable, "-c", start], capture_output=True, text=True, timeout=300, env=env, check=False
    )


def _flat(text: str) -> str:
    return " ".join(text.split())  # the message is wrapped to 80 columns wherever its words fall


@pytest.fixture(autouse=True)
def fresh_reading() -> Iterator[None]:
    """Each test reads the machine's memory (or its stand-in) anew."""
    fit.forget_reading()
    yield
    fit.forget_reading()


# ---------------------------------------------------------------------------------------------- library fusions


@pytest.mark.slow
def test_what_a_library_fusion_allocates_is_counted() -> None:
    # Five 4096 x 4096 float32 matmul outputs (64 MiB each) added together and summed: XLA:CPU hands the whole
    # program to YNNPACK as one fusion, and its buffer assignment reports no temporaries at all, while the run
    # raises the process's peak resident memory by about 190 MiB. The count from the fusion's values (two
    # outputs and their sum alive at once, 192 MiB) is what the run took, less what it allocates beside the
    # program (the process's own slack: a few MiB).
    done = _worker("library", "4096", "4096", "measure", nbytes=6 * GiB)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    figures, grew = result["figures"], result["grew"]
    assert figures["temp"] < MiB  # XLA's own figure: nearly nothing
    assert figures["library_temp"] == 3 * 64 * MiB
    assert grew > 2 * 64 * MiB, f"the run raised the peak by {grew} B only"
    assert figures["device_bytes"] + 16 * MiB >= grew


@pytest.mark.slow
def test_a_program_whose_library_fusion_cannot_fit_is_refused_before_it_runs() -> None:
    # The probe: five 65536 x 32768 float32 activations (8 GiB each) combined at the end. XLA's figures say
    # 14 MiB; the run takes 24 GiB. Under a 4 GB address-space limit a run let through fails to allocate.
    done = _worker("library", "65536", "32768", nbytes=4 * GiB)
    assert done.returncode == 3, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"
    figures = json.loads(done.stdout.splitlines()[0])
    assert figures["library_temp"] == 24 * GiB
    flat = _flat(done.stdout)
    assert "would allocate 24.0 GiB of device memory" in flat
    assert "matmul_out and more, in library fusion" in flat


def test_the_big_program_is_refused_by_the_machines_memory_too(monkeypatch: pytest.MonkeyPatch) -> None:
    # The same program against a 16 GiB machine (its stand-in), checked without running (nothing allocated).
    monkeypatch.setattr(fit, "host_available", lambda: 16 * GiB)
    ir, x = _five_matmuls(65536, 32768)
    feeds = {x: np.ones((65536, 16), np.float32)}
    with popxl.Session(ir, "cpu") as session:
        assert session.memory_analysis(feeds)["temp"] < 64 * MiB  # what XLA's figures alone would have checked
        with pytest.raises(popxl.OutOfMemoryError, match=r"24\.0 GiB of device memory"):
            session.check_memory(feeds)


def _five_matmuls(rows: int, cols: int) -> tuple[popxl.Ir, popxl.HostToDeviceStream]:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((rows, 16), popxl.float32, name="x")
        xv = ops.host_load(x)
        total = ops.matmul(xv, popxl.variable(np.ones((16, cols), np.float32), name="w0"))
        for i in range(1, 5):
            total = total + ops.matmul(xv, popxl.variable(np.ones((16, cols), np.float32), name=f"w{i}"))
        y = popxl.d2h_stream((), popxl.float32, name="y")
        ops.host_store(y, ops.sum(total))
    return ir, x


_FUSED = """
%fused_computation (param_0: f32[1024,16], param_1: f32[16,1024], param_2: f32[1024]) -> f32[1024,1024] {
  %param_0 = f32[1024,16]{1,0} parameter(0)
  %param_1 = f32[16,1024]{1,0} parameter(1)
  %param_2 = f32[1024]{0} parameter(2)
  %broadcast = f32[1024,1024]{1,0} broadcast(%param_2), dimensions={1}
  %scaled = f32[1024,1024]{1,0} multiply(%broadcast, %broadcast)
  %dot.1 = f32[1024,1024]{1,0} dot(%param_0, %param_1), metadata={op_name="jit(step)/first/dot"}
  %dot.2 = f32[1024,1024]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %sum = f32[1024,1024]{1,0} add(%dot.1, %dot.2)
  %transpose = f32[1024,1024]{0,1} transpose(%sum), dimensions={1,0}
  ROOT %out = f32[1024,1024]{1,0} add(%transpose, %scaled)
}

ENTRY %main (a: f32[1024,16], b: f32[16,1024], c: f32[1024]) -> f32[1024,1024] {
  %a = f32[1024,16]{1,0} parameter(0)
  %b = f32[16,1024]{1,0} parameter(1)
  %c = f32[1024]{0} parameter(2)
  ROOT %ynn_fusion = f32[1024,1024]{1,0} fusion(%a, %b, %c), kind=kCustom, calls=%fused_computation,
    backend_config={"fusion_config":{"kind":"__ynn_fusion"}}
}
""".replace(",\n    backend_config", ", backend_config")  # one line, as XLA writes it


def test_a_library_fusions_peak_follows_its_values_lives() -> None:
    # 4 MiB each: dot.1 and dot.2 alive with their sum (12 MiB), then the sum with its transpose (8 MiB).
    # The elementwise square of an input is computed within its reader, and the result is XLA's buffer.
    peak = memory.library_peak(_FUSED)
    assert peak.nbytes == 12 * MiB
    assert (peak.fusion, peak.largest, peak.op_name) == ("ynn_fusion", "dot.1", "jit(step)/first/dot")
    # A GPU's custom fusions (a Triton GEMM's) are compiled kernels, whose values XLA's figures hold.
    assert memory.library_peak(_FUSED.replace("__ynn_fusion", "__triton_gemm")).nbytes == 0


# ---------------------------------------------------------------------------------------------- process limits


@pytest.mark.slow
def test_an_address_space_limit_refuses_what_it_would_fail() -> None:
    # The probe: a 4 GB remote buffer under `ulimit -v` 2.8 GiB passed the check, then numpy raised MemoryError.
    done = _worker("attach", str(4 * 10**9), nbytes=int(2.8 * GiB))
    assert done.returncode == 3, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"
    flat = _flat(done.stdout)
    assert "but this process has" in flat and "(RLIMIT_AS (ulimit -v) less the address space in use)" in flat


@pytest.mark.slow
def test_an_address_space_limit_refuses_a_run_too() -> None:
    done = _worker("run", str(4 * 10**9), nbytes=int(2.8 * GiB))
    assert done.returncode == 3, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"
    assert "RLIMIT_AS" in done.stdout and "matmul_out" in done.stdout


@pytest.mark.slow
def test_a_data_limit_refuses_what_it_would_fail() -> None:
    done = _worker("attach", str(2 * 10**9), limit=resource.RLIMIT_DATA, nbytes=int(1.5 * GiB))
    assert done.returncode == 3, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"
    assert "(RLIMIT_DATA (ulimit -d) less the data in use)" in _flat(done.stdout)


def test_the_switch_turns_the_process_limits_off_too(monkeypatch: pytest.MonkeyPatch) -> None:
    ir, x = _five_matmuls(8, 8)
    with popxl.Session(ir, "cpu") as session:
        feeds = {x: np.ones((8, 16), np.float32)}
        monkeypatch.setattr(fit, "host_limits", lambda: {"RLIMIT_AS (ulimit -v) less the address space in use": 10})
        fit.forget_reading()
        with pytest.raises(popxl.OutOfMemoryError, match=r"this process has 10 B available \(RLIMIT_AS"):
            session.check_memory(feeds)
        monkeypatch.setenv(fit.CHECK_VARIABLE, "0")
        session.check_memory(feeds)
        session.run(feeds)


# ---------------------------------------------------------------------------------------------- the OS's figures


def _machine(root: Path, available: int, cgroup: str, files: dict[str, str]) -> None:
    """A stand-in /proc (meminfo, self/cgroup, self/status) and /sys/fs/cgroup under `root`."""
    (root / "proc" / "self").mkdir(parents=True)
    (root / "proc" / "meminfo").write_text(f"MemTotal: 99999999 kB\nMemAvailable: {available // 1024} kB\n")
    (root / "proc" / "self" / "cgroup").write_text(cgroup)
    (root / "proc" / "self" / "status").write_text("VmSize: 1000 kB\nVmData: 500 kB\n")
    for name, text in files.items():
        path = root / "cgroup" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[int, str, dict[str, str]], None]:
    """Points the check at a stand-in machine made by `_machine`, with no process limits and no launch."""
    monkeypatch.setattr(fit, "PROC", tmp_path / "proc")
    monkeypatch.setattr(fit, "CGROUP_ROOT", tmp_path / "cgroup")
    monkeypatch.setattr(fit, "_rlimit_available", lambda limit, field: None)
    for name in ("POPDIST_NUM_INSTANCES", "POPDIST_INSTANCE_INDEX", "POPDIST_LOCAL_INSTANCE_INDEX"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("POPDIST_NUM_LOCAL_INSTANCES", raising=False)
    return lambda available, cgroup, files: _machine(tmp_path, available, cgroup, files)


def test_a_cgroup_v2_limit_binds(machine: Callable[[int, str, dict[str, str]], None]) -> None:
    # A job's cgroup of 1 GiB, 256 MiB of it used (64 MiB of that reclaimable cache), under an unlimited parent.
    machine(
        8 * GiB,
        "0::/user.slice/job\n",
        {
            "user.slice/memory.max": "max\n",
            "user.slice/memory.current": str(5 * GiB),
            "user.slice/job/memory.max": str(GiB),
            "user.slice/job/memory.current": str(256 * MiB),
            "user.slice/job/memory.stat": f"anon 1\ninactive_file {64 * MiB}\n",
        },
    )
    assert fit.host_limits() == {"MemAvailable": 8 * GiB, "the cgroup's memory limit": 832 * MiB}
    assert fit.host_available() == 832 * MiB


def test_a_cgroup_v1_limit_binds_where_v2_sets_none(machine: Callable[[int, str, dict[str, str]], None]) -> None:
    # A hybrid layout: v2's hierarchy (at unified/) limits nothing; v1's memory controller limits 2 GiB. The
    # container mounts its own cgroup as memory/'s root, which /proc/self/cgroup names from the host's.
    machine(
        8 * GiB,
        "4:memory:/docker/abc\n0::/\n",
        {
            "unified/cgroup.controllers": "",
            "memory/memory.limit_in_bytes": str(2 * GiB),
            "memory/memory.usage_in_bytes": str(512 * MiB),
            "memory/memory.stat": f"total_inactive_file {128 * MiB}\n",
        },
    )
    assert fit.host_available() == 2 * GiB - 512 * MiB + 128 * MiB


def test_memavailable_binds_without_a_cgroup(machine: Callable[[int, str, dict[str, str]], None]) -> None:
    machine(3 * GiB, "0::/\n", {"memory.max": "max\n", "memory.current": "1\n"})
    assert fit.host_limits() == {"MemAvailable": 3 * GiB}


@pytest.mark.parametrize(
    ("variables", "instances"),
    [
        ({}, 1),
        ({"POPDIST_NUM_INSTANCES": "4", "POPDIST_INSTANCE_INDEX": "2", "POPDIST_LOCAL_INSTANCE_INDEX": "2"}, 4),
        # 2 hosts of 4: the second host's instances find 4 (first instance 4: 1, 2 or 4 a host; at least 4).
        ({"POPDIST_NUM_INSTANCES": "8", "POPDIST_INSTANCE_INDEX": "7", "POPDIST_LOCAL_INSTANCE_INDEX": "3"}, 4),
        ({"POPDIST_NUM_INSTANCES": "8", "POPDIST_INSTANCE_INDEX": "4", "POPDIST_LOCAL_INSTANCE_INDEX": "0"}, 4),
        # The first host of several cannot tell: all 8 is the most it may hold.
        ({"POPDIST_NUM_INSTANCES": "8", "POPDIST_INSTANCE_INDEX": "1", "POPDIST_LOCAL_INSTANCE_INDEX": "1"}, 8),
        ({"POPDIST_NUM_INSTANCES": "8", "POPDIST_NUM_LOCAL_INSTANCES": "2"}, 2),
    ],
)
def test_local_instances(monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], instances: int) -> None:
    for name in ("NUM_INSTANCES", "INSTANCE_INDEX", "LOCAL_INSTANCE_INDEX", "NUM_LOCAL_INSTANCES"):
        monkeypatch.delenv(f"POPDIST_{name}", raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert fit.local_instances() == instances


def test_a_launchs_instances_on_one_host_share_its_memory(
    machine: Callable[[int, str, dict[str, str]], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The probe: every poprun instance on a host saw all of its free memory, and together they took more.
    # 8 GiB available and a cgroup of 6 GiB free, shared by 4 instances: 1.5 GiB each.
    machine(
        8 * GiB,
        "0::/job\n",
        {"job/memory.max": str(7 * GiB), "job/memory.current": str(GiB)},
    )
    monkeypatch.setenv("POPDIST_NUM_INSTANCES", "4")
    monkeypatch.setenv("POPDIST_INSTANCE_INDEX", "1")
    monkeypatch.setenv("POPDIST_LOCAL_INSTANCE_INDEX", "1")
    assert fit.host_available() == 6 * GiB // 4
    # A run of 3 GiB (three 1 GiB values of a library fusion) would fit one instance's view of the machine,
    # not its share. Checked without running.
    ir, x = _five_matmuls(8192, 32768)
    with popxl.Session(ir, "cpu") as session, pytest.raises(popxl.OutOfMemoryError) as caught:
        session.check_memory({x: np.ones((8192, 16), np.float32)})
    flat = _flat(str(caught.value))
    assert "has 1.50 GiB available (the cgroup's memory limit, a 1/4 share: this host runs 4 instances" in flat


_INSTANCE = """
import re, sys
from pathlib import Path
import numpy as np
import popxl
from popxl import ops

available = int(re.search(r"MemAvailable:\\s+(\\d+) kB", Path("/proc/meminfo").read_text()).group(1)) * 1024
rows = 65536
cols = int(0.75 * available / 3 / rows / 4)  # a library fusion's three values: 3/4 of the host's memory
ir = popxl.Ir()
with ir.main_graph:
    x = popxl.h2d_stream((rows, 16), popxl.float32, name="x")
    xv = ops.host_load(x)
    total = ops.matmul(xv, popxl.variable(np.ones((16, cols), np.float32), name="w0"))
    for i in range(1, 5):
        total = total + ops.matmul(xv, popxl.variable(np.ones((16, cols), np.float32), name=f"w{i}"))
    y = popxl.d2h_stream((), popxl.float32, name="y")
    ops.host_store(y, ops.sum(total))
with popxl.Session(ir, "cpu") as session:
    try:
        session.check_memory({x: np.ones((rows, 16), np.float32)})  # checked only: never run
    except popxl.OutOfMemoryError as e:
        print("refused:", " ".join(str(e).split()), flush=True)
    else:
        print("fits", flush=True)
"""


@pytest.mark.slow
@pytest.mark.skipif(fit.host_available() is None, reason="this machine's available memory cannot be read")
def test_two_poprun_instances_on_this_host_each_check_against_half(tmp_path: Path) -> None:
    # The probe, launched for real: each of two instances would fit 3/4 of the host's memory alone, and
    # together they would take 1.5 times it. Each checks without running.
    program = tmp_path / "instance.py"
    program.write_text(_INSTANCE)
    env = {k: v for k, v in os.environ.items() if k != fit.CHECK_VARIABLE and not k.startswith("POPDIST_")}
    launch = [sys.executable, "-m", "popdist.launcher", "--num-instances", "2", "--num-replicas", "2"]
    done = subprocess.run(
        [*launch, sys.executable, str(program)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr[-3000:]}"
    lines = [line for line in done.stdout.splitlines() if "refused:" in line or "fits" in line]
    assert len(lines) == 2, done.stdout
    assert all("refused:" in line and "a 1/2 share: this host runs 2 instances of the launch" in line for line in lines)
