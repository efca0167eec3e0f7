"""popdist and the poprun launcher: instances of one program on this host, joined on loopback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import popdist
import popdist.popart
import pytest
from popdist import _env, _start, launcher
from poprun_helpers import gone, write_program

import popxl

POPRUN = [sys.executable, "-m", "popdist.launcher"]
# Generous for a loaded machine, but bounded: nothing here may hang.
RUN_TIMEOUT_S = 400
QUICK_TIMEOUT_S = 120


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in _env.ALL}


def _poprun(*args: str, timeout: float = QUICK_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*POPRUN, *args], capture_output=True, text=True, timeout=timeout, env=_clean_env(), check=False
    )


def test_outside_a_launch_popdist_answers_one_instance(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _env.ALL:
        monkeypatch.delenv(name, raising=False)
    assert not popdist.isPopdistEnvSet()
    assert popdist.getNumInstances() == 1
    assert popdist.getInstanceIndex() == 0
    assert popdist.getLocalInstanceIndex() == 0
    assert popdist.getNumTotalReplicas() == 1
    assert popdist.getNumLocalReplicas() == 1
    assert popdist.getReplicaIndexOffset() == 0
    assert popdist.getNumIpusPerReplica() == 1
    assert popdist.checkNumIpusPerReplica(2)
    assert popdist.execute_on_instances({0}, lambda a: a + 1, 1) == 2
    assert popdist.execute_on_instances({1}, lambda a: a + 1, 1) is None
    popdist.init()  # nothing to join
    opts = popxl.Ir().session_options
    popdist.popart.configureSessionOptions(opts)
    assert opts.globalReplicationFactor == 1
    assert opts.globalReplicaOffset == 0
    assert opts.enableDistributedReplicatedGraphs is False
    with pytest.raises(AttributeError, match="stand-in"):
        popdist.getDeviceId  # noqa: B018
    with pytest.raises(RuntimeError, match="no IPUs"):
        popdist.popart.getDevice()


def test_popdist_reads_the_launch_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    values = {
        _env.NUM_INSTANCES: "2",
        _env.INSTANCE_INDEX: "1",
        _env.NUM_TOTAL_REPLICAS: "8",
        _env.NUM_LOCAL_REPLICAS: "4",
        _env.REPLICA_INDEX_OFFSET: "4",
        _env.NUM_IPUS_PER_REPLICA: "2",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    assert popdist.isPopdistEnvSet()
    assert (popdist.getNumInstances(), popdist.getInstanceIndex()) == (2, 1)
    assert (popdist.getNumTotalReplicas(), popdist.getNumLocalReplicas(), popdist.getReplicaIndexOffset()) == (8, 4, 4)
    assert popdist.getNumIpusPerReplica() == 2 and not popdist.checkNumIpusPerReplica(1)
    assert popdist.execute_on_instances([0], lambda: 1) is None
    opts = popxl.Ir().session_options
    popdist.popart.configureSessionOptions(opts)
    assert opts.globalReplicationFactor == 8
    assert opts.globalReplicaOffset == 4
    assert opts.replicatedGraphCount == 4
    assert opts.enableDistributedReplicatedGraphs is True
    monkeypatch.setenv(_env.INSTANCE_INDEX, "2")
    with pytest.raises(ValueError, match="not below"):
        popdist.getInstanceIndex()
    monkeypatch.setenv(_env.NUM_LOCAL_REPLICAS, "four")
    with pytest.raises(ValueError, match="not an integer"):
        popdist.getNumLocalReplicas()


@pytest.mark.slow
def test_poprun_runs_a_popxl_program_over_two_instances(tmp_path: Path) -> None:
    # Each instance feeds its own two of the four replicas; collectives and a grouped variable span both.
    prog = write_program(
        tmp_path,
        "prog.py",
        """
        import numpy as np
        import popdist
        import popdist.popart
        import popxl
        from popxl import ops

        # As popxl programs do: the Ir joins the launch and spans every instance's replicas.
        ir = popxl.Ir(replication="popdist")
        total, local = popdist.getNumTotalReplicas(), popdist.getNumLocalReplicas()
        offset = popdist.getReplicaIndexOffset()
        assert ir.replication_factor == total
        assert ir.session_options.globalReplicationFactor == total and ir.session_options.globalReplicaOffset == offset
        with ir.main_graph, popxl.in_sequence(True):
            h = popxl.h2d_stream((3,), popxl.float32, "x")
            d = popxl.d2h_stream((3,), popxl.float32, "y")
            pairs = ir.replica_grouping(stride=2, group_size=2)
            v = popxl.variable(np.array([[1, 1, 1], [2, 2, 2]], np.float32), name="v", replica_grouping=pairs)
            x = ops.host_load(h)
            s = ops.collectives.replicated_all_reduce(x * v)
            ops.var_updates.accumulate_(v, s)
            ops.host_store(d, s + ops.collectives.replicated_all_reduce(x, group=pairs))
        assert ir.instance_replication_factor == local
        x = np.arange(12, dtype=np.float32).reshape(4, 3)
        with popxl.Session(ir, "ipu_hw") as session:
            assert session.local_replicas == local
            out = session.run({h: x[offset : offset + local]})[d]
            final = session.get_tensor_data(v)
        s = (x * np.array([1, 2, 1, 2], np.float32)[:, None]).sum(0)
        pair_sum = np.stack([x[r] + x[(r + 2) % 4] for r in range(4)])
        np.testing.assert_allclose(out, (s + pair_sum)[offset : offset + local])
        np.testing.assert_allclose(final, np.stack([1 + s, 2 + s]))
        print(f"instance {popdist.getInstanceIndex()} ok: replicas {offset}..{offset + local - 1}", flush=True)
        """,
    )
    result = _poprun(
        "--num-instances", "2", "--num-replicas", "4", "--init-timeout", "240", sys.executable, str(prog),
        timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[1,0]<stdout>:instance 0 ok: replicas 0..1" in result.stdout
    assert "[1,1]<stdout>:instance 1 ok: replicas 2..3" in result.stdout


def test_poprun_prefixes_output_and_passes_the_environment(tmp_path: Path) -> None:
    prog = write_program(
        tmp_path,
        "show.py",
        f"""
        import os, sys
        import popdist
        print("index", popdist.getInstanceIndex(), "of", popdist.getNumInstances(),
              "replicas", popdist.getNumLocalReplicas(), "from", popdist.getReplicaIndexOffset(),
              "ipus", popdist.getNumIpusPerReplica(), "timeout", os.environ["{_env.INIT_TIMEOUT}"],
              "args", sys.argv[1:])
        print("to stderr", file=sys.stderr)
        """,
    )
    common = ["--num-instances", "2", "--num-replicas", "6", "--ipus-per-replica", "2", "--init-timeout", "7"]
    # PopRun's IPU and MPI options are accepted and change nothing.
    fabric = ["--vipu-partition", "p", "--update-partition", "yes", "--mpi-local-args=-x PATH -x PYTHONPATH"]
    result = _poprun(*common, *fabric, "--", sys.executable, str(prog), "--flag", "a")
    assert result.returncode == 0, result.stdout + result.stderr
    for i in range(2):
        line = f"[1,{i}]<stdout>:index {i} of 2 replicas 3 from {3 * i} ipus 2 timeout 7.0 args ['--flag', 'a']"
        assert line in result.stdout.splitlines()
        assert f"[1,{i}]<stderr>:to stderr" in result.stderr.splitlines()

    only = _poprun(*common, "--only-output-from-instance", "0", sys.executable, str(prog))
    assert only.returncode == 0, only.stdout + only.stderr
    assert "[1,0]<stdout>:index 0 of 2" in only.stdout
    assert "[1,1]" not in only.stdout + only.stderr


def test_a_failing_instance_stops_the_others(tmp_path: Path) -> None:
    prog = write_program(
        tmp_path,
        "fail.py",
        f"""
        import os, sys, time
        import popdist
        from pathlib import Path
        index = popdist.getInstanceIndex()
        Path({str(tmp_path)!r}, f"pid{{index}}").write_text(str(os.getpid()))
        print("started", index, flush=True)
        if index == 1:
            while not Path({str(tmp_path)!r}, "pid0").exists():
                time.sleep(0.05)
            sys.exit(3)
        time.sleep({QUICK_TIMEOUT_S * 2})
        """,
    )
    start = time.monotonic()
    result = _poprun(
        "--num-instances", "2", "--num-replicas", "2", "--only-output-from-instance", "0", sys.executable, str(prog)
    )
    assert time.monotonic() - start < QUICK_TIMEOUT_S
    assert result.returncode == 3, result.stdout + result.stderr
    assert result.stderr.splitlines()[-1] == "poprun: instance 1 exited with code 3; stopped the other instances"
    # instance 1's output was hidden, so poprun shows its last lines on failure
    assert "[1,1]<stdout>:started 1" in result.stderr
    assert gone(int((tmp_path / "pid0").read_text()))


def test_ctrl_c_stops_every_instance(tmp_path: Path) -> None:
    prog = write_program(
        tmp_path,
        "wait.py",
        f"""
        import os, time
        import popdist
        from pathlib import Path
        Path({str(tmp_path)!r}, f"pid{{popdist.getInstanceIndex()}}").write_text(str(os.getpid()))
        time.sleep({QUICK_TIMEOUT_S * 2})
        """,
    )
    # A suite started where SIGINT is ignored (the background of a script) passes that on, and poprun would
    # rightly ignore the Ctrl-C: it starts here with SIGINT's default, as from a terminal.
    with_default_sigint = (
        "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", with_default_sigint, *POPRUN, "--num-instances", "2", sys.executable, str(prog)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_clean_env(),
    )
    try:
        deadline = time.monotonic() + QUICK_TIMEOUT_S
        while not all((tmp_path / f"pid{i}").exists() for i in range(2)):
            assert time.monotonic() < deadline and proc.poll() is None, "the instances did not start"
            time.sleep(0.05)
        time.sleep(0.2)  # let the pid files be complete
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=QUICK_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "poprun: interrupted; stopping the instances" in err
    for i in range(2):
        assert gone(int((tmp_path / f"pid{i}").read_text()))


@pytest.mark.slow
def test_unreachable_coordinator_times_out(tmp_path: Path) -> None:
    env = _clean_env()
    env.update(
        {
            _env.NUM_INSTANCES: "2",
            _env.INSTANCE_INDEX: "1",
            _env.NUM_TOTAL_REPLICAS: "2",
            _env.NUM_LOCAL_REPLICAS: "1",
            _env.REPLICA_INDEX_OFFSET: "1",
            _env.COORDINATOR_ADDRESS: f"127.0.0.1:{_start.free_port()}",  # nobody listens there
            _env.INIT_TIMEOUT: "2",
            "JAX_PLATFORMS": "cpu",
        }
    )
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", "import popdist; popdist.init()"],
        capture_output=True,
        text=True,
        timeout=QUICK_TIMEOUT_S,
        env=env,
        check=False,
    )
    assert time.monotonic() - start < QUICK_TIMEOUT_S
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("TimeoutError: popdist.init: instance 1 of 2 could not reach the coordinator"), result.stderr
    assert "within 2 s" in last


def test_poprun_rejects_bad_command_lines(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, message in [
        (["--num-instances", "2", "--num-replicas", "3", "prog"], "not a multiple"),
        (["--num-instances", "2"], "no program"),
        (["--num-instances", "2", "--only-output-from-instance", "2", "prog"], "names no instance"),
        (["--num-instances", "0", "prog"], "at least 1"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            launcher.main(argv)
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err


def test_poprun_reports_a_program_that_cannot_start(tmp_path: Path) -> None:
    result = _poprun("--num-instances", "2", str(tmp_path / "missing"))
    assert result.returncode == 127
    assert "cannot start instance 0" in result.stderr
