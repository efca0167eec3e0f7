"""poprun across hosts: one launcher per host, here two launchers on loopback playing two hosts."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

import pytest
from popdist import _env, _hosts, _start, _supervise, launcher
from poprun_helpers import CLUSTER_VARIABLES, clean_env, finish, gone, launchers, write_program

# Bounds for a loaded machine: nothing here may hang.
RUN_TIMEOUT_S = 300
QUICK_TIMEOUT_S = 60
# The secret every host of these launches shares.
SECRET = "hosts-test-" + "5a" * 16


def test_host_lists_expand_as_poprun_and_slurm_write_them(tmp_path: Path) -> None:
    assert _hosts.expand_hosts("a,b") == ["a", "b"]
    assert _hosts.expand_hosts("node[08-10,3],gpu1") == ["node08", "node09", "node10", "node3", "gpu1"]
    assert _hosts.expand_hosts("r[1-2]x") == ["r1x", "r2x"]
    with pytest.raises(ValueError, match="runs backwards"):
        _hosts.expand_hosts("n[3-1]")
    with pytest.raises(ValueError, match="not a number"):
        _hosts.expand_hosts("n[a-b]")
    # Counted before expanding: a huge range is a clear error at once, not a process filling the memory.
    start = time.monotonic()
    with pytest.raises(ValueError, match=f"names 1000000000 hosts, more than poprun takes \\({_hosts.MAX_HOSTS}\\)"):
        _hosts.expand_hosts("n[0-999999999]")
    with pytest.raises(ValueError, match="more than poprun takes"):
        _hosts.expand_hosts(f"a[1-{_hosts.MAX_HOSTS}],b")
    assert time.monotonic() - start < 5
    assert len(_hosts.expand_hosts(f"n[1-{_hosts.MAX_HOSTS}]")) == _hosts.MAX_HOSTS
    with pytest.raises(ValueError, match="poprun takes 1 to"):
        _hosts.resolve(None, 10**9, 0, "h:1", "none")
    hostfile = tmp_path / "hosts"
    hostfile.write_text("h0  # the first\n\nh1\n")
    assert _hosts.read_hostfile(str(hostfile)) == ["h0", "h1"]
    assert _hosts.split_address("[::1]:80") == ("::1", 80)
    with pytest.raises(ValueError, match="not host:port"):
        _hosts.split_address("h0")


def test_cluster_places_are_those_jax_detects(monkeypatch: pytest.MonkeyPatch) -> None:
    from jax._src.clusters import OmpiCluster, SlurmCluster

    for name in list(os.environ):
        if name.startswith(CLUSTER_VARIABLES):
            monkeypatch.delenv(name)
    assert _hosts.resolve(None, None, None, None, "auto") == _hosts.HostPlace(1, 0, None, "this host")
    with pytest.raises(ValueError, match="not started by slurm"):
        _hosts.resolve(None, None, None, None, "slurm")

    slurm = {
        "SLURM_JOB_ID": "123457",
        "SLURM_STEP_NODELIST": "gpu[007-009],cpu1",
        "SLURM_NTASKS": "4",
        "SLURM_PROCID": "2",
        "SLURM_LOCALID": "0",
    }
    for name, value in slurm.items():
        monkeypatch.setenv(name, value)
    place = _hosts.resolve(None, None, None, None, "auto")
    assert place.source == "SLURM"
    assert (place.num_hosts, place.host_index) == (SlurmCluster.get_process_count(), SlurmCluster.get_process_id())
    assert place.address == SlurmCluster.get_coordinator_address(None, None)
    # Given values win over the cluster's; the cluster can also be ignored.
    assert _hosts.resolve(None, None, 1, "h:5", "slurm") == _hosts.HostPlace(4, 1, "h:5", "SLURM")
    assert _hosts.resolve(None, None, None, None, "none").num_hosts == 1
    monkeypatch.setenv(_hosts.PORT_VARIABLE, "4321")
    assert _hosts.resolve(None, None, None, None, "auto").address == SlurmCluster.get_coordinator_address(None, "4321")

    uri = "1531576320.0;tcp://10.96.0.1,10.148.0.1:34911"
    monkeypatch.delenv(_hosts.PORT_VARIABLE)
    ompi = {"OMPI_MCA_orte_hnp_uri": uri, "OMPI_COMM_WORLD_SIZE": "3", "OMPI_COMM_WORLD_RANK": "1"}
    for name, value in ompi.items():
        monkeypatch.setenv(name, value)
    place = _hosts.resolve(None, None, None, None, "auto")  # Open MPI before SLURM, as in JAX
    assert place.source == "Open MPI"
    assert (place.num_hosts, place.host_index) == (OmpiCluster.get_process_count(), OmpiCluster.get_process_id())
    assert place.address == OmpiCluster.get_coordinator_address(None, None)


def test_explicit_hosts_need_a_place(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(CLUSTER_VARIABLES):
            monkeypatch.delenv(name)
    monkeypatch.setattr(socket, "gethostname", lambda: "node1")
    monkeypatch.setattr(socket, "getfqdn", lambda: "node1.cluster")
    assert _hosts.resolve(["node0.cluster", "node1.cluster"], None, None, None, "auto").host_index == 1
    assert _hosts.resolve(_hosts.expand_hosts("node[0-1]"), None, None, None, "auto").host_index == 1
    both = ["127.0.0.1", "127.0.0.1"]
    with pytest.raises(ValueError, match="give --host-index"):
        _hosts.resolve(both, None, None, None, "auto")
    assert _hosts.resolve(both, None, 1, None, "auto").address == f"127.0.0.1:{_hosts.DEFAULT_PORT}"
    assert _hosts.resolve(["solo"], None, None, None, "auto") == _hosts.HostPlace(1, 0, None, "the command line")
    with pytest.raises(ValueError, match="does not match"):
        _hosts.resolve(both, 3, 0, None, "auto")
    with pytest.raises(ValueError, match="need host 0's address"):
        _hosts.resolve(None, 2, 0, None, "auto")
    with pytest.raises(ValueError, match="not below"):
        _hosts.resolve(None, 2, 2, "h:1", "auto")


def test_poprun_rejects_bad_host_command_lines(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, message in [
        (["--num-instances", "3", "--num-hosts", "2", "--host-index", "0", "--coordinator-address", "h:1", "p"],
         "cannot be divided evenly among 2 hosts"),
        (["--num-hosts", "2", "--host-index", "0", "--coordinator-address", "h", "p"], "not host:port"),
        (["--host", "a", "--hostfile", "f", "p"], "not allowed with argument"),
    ]:  # fmt: skip
        with pytest.raises(SystemExit) as exit_info:
            launcher.main(argv)
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err


def test_two_hosts_share_out_global_instances(tmp_path: Path) -> None:
    # Each host's poprun starts 2 of the 4 instances; indices and replica offsets are global.
    prog = write_program(
        tmp_path,
        "show.py",
        f"""
        import os
        import popdist
        print("index", popdist.getInstanceIndex(), "local", popdist.getLocalInstanceIndex(),
              "of", popdist.getNumInstances(), "replicas", popdist.getNumLocalReplicas(),
              "from", popdist.getReplicaIndexOffset(), "of", popdist.getNumTotalReplicas(),
              "devices", os.environ["JAX_LOCAL_DEVICE_IDS"], "coordinator", os.environ["{_env.COORDINATOR_ADDRESS}"])
        """,
    )
    port = str(_start.free_port())
    common = ["--num-instances", "4", "--num-replicas", "8", "--host", "127.0.0.1,127.0.0.1", "--init-timeout", "30"]
    procs = launchers(
        [[*common, "--host-index", str(h), "--print-topology", "yes", sys.executable, str(prog)] for h in range(2)],
        [clean_env(SECRET, **{_hosts.PORT_VARIABLE: port}) for _ in range(2)],
    )
    results = finish(procs, QUICK_TIMEOUT_S)
    coordinators = set()
    for host, (code, out, err) in enumerate(results):
        assert code == 0, out + err
        assert "hosts     |  0  |  0  |  1  |  1  |" in err  # the topology
        lines = sorted(out.splitlines())
        assert len(lines) == 2, out
        for local, line in enumerate(lines):
            index = 2 * host + local
            prefix = (
                f"[1,{index}]<stdout>:index {index} local {local} of 4 replicas 2 from {2 * index} of 8 devices 0,1"
            )
            assert line.startswith(prefix + " coordinator 127.0.0.1:"), line
            coordinators.add(line.rsplit(" ", 1)[1])
    assert len(coordinators) == 1  # host 0's choice reaches every instance


@pytest.mark.slow
def test_two_hosts_under_slurm_run_onewrite_program() -> None:
    # As `srun --ntasks-per-node=1 poprun ...` would on two nodes: SLURM's variables give each poprun its place.
    worker = Path(__file__).with_name("multihost_worker.py")
    port = str(_start.free_port())
    envs = [
        clean_env(
            SECRET,
            SLURM_JOB_ID="4242",
            SLURM_STEP_NODELIST="127.0.0.1",
            SLURM_NTASKS="2",
            SLURM_PROCID=str(h),
            SLURM_LOCALID="0",
            **{_hosts.PORT_VARIABLE: port},
        )
        for h in range(2)
    ]
    args = ["--num-instances", "2", "--num-replicas", "4", "--init-timeout", "200", sys.executable, str(worker)]
    results = finish(launchers([args, args], envs), RUN_TIMEOUT_S)
    for host, (code, out, err) in enumerate(results):
        assert code == 0, out + err
        assert f"[1,{host}]<stdout>:instance {host} ok: replicas {2 * host}..{2 * host + 1} of 4" in out


def test_a_failing_instance_on_one_host_stops_every_host(tmp_path: Path) -> None:
    prog = write_program(
        tmp_path,
        "fail.py",
        f"""
        import os, sys, time
        import popdist
        from pathlib import Path
        index = popdist.getInstanceIndex()
        Path({str(tmp_path)!r}, f"pid{{index}}").write_text(str(os.getpid()))
        if index == 3:
            while not all(Path({str(tmp_path)!r}, f"pid{{i}}").exists() for i in range(3)):
                time.sleep(0.05)
            sys.exit(3)
        time.sleep({QUICK_TIMEOUT_S * 2})
        """,
    )
    address = f"127.0.0.1:{_start.free_port()}"
    common = ["--num-instances", "4", "--num-hosts", "2", "--coordinator-address", address, "--init-timeout", "30"]
    start = time.monotonic()
    results = finish(
        launchers(
            [[*common, "--host-index", str(h), sys.executable, str(prog)] for h in range(2)], [clean_env(SECRET)] * 2
        ),
        QUICK_TIMEOUT_S,
    )
    assert time.monotonic() - start < QUICK_TIMEOUT_S
    for code, out, err in results:
        assert code == 3, out + err
        assert err.splitlines()[-1] == "poprun: instance 3 on host 1 exited with code 3; stopped the other instances"
    for i in range(3):
        assert gone(int((tmp_path / f"pid{i}").read_text()))


@pytest.mark.slow
def test_a_killed_host_stops_the_others(tmp_path: Path) -> None:
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
    address = f"127.0.0.1:{_start.free_port()}"
    common = ["--num-instances", "2", "--num-hosts", "2", "--coordinator-address", address, "--init-timeout", "30"]
    procs = launchers(
        [[*common, "--host-index", str(h), sys.executable, str(prog)] for h in range(2)], [clean_env(SECRET)] * 2
    )
    try:
        deadline = time.monotonic() + QUICK_TIMEOUT_S
        while not all((tmp_path / f"pid{i}").exists() for i in range(2)):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "the instances did not start"
            time.sleep(0.05)
        time.sleep(0.2)  # let the pid files be complete
        procs[1].send_signal(signal.SIGKILL)
    finally:
        results = finish(procs, QUICK_TIMEOUT_S)
    code, out, err = results[0]
    assert code == _supervise.LAUNCH_FAILED, out + err
    assert err.splitlines()[-1] == "poprun: lost contact with host 1's poprun; stopped the other instances"
    deadline = time.monotonic() + 10
    while not all(gone(int((tmp_path / f"pid{i}").read_text())) for i in range(2)):
        assert time.monotonic() < deadline, "an instance outlived its poprun"
        time.sleep(0.05)


@pytest.mark.slow
def test_unreachable_or_missing_hosts_time_out() -> None:
    address = f"127.0.0.1:{_start.free_port()}"  # nobody listens there
    common = ["--num-hosts", "2", "--coordinator-address", address, "--init-timeout", "2", "true"]
    start = time.monotonic()
    results = finish(launchers([["--host-index", "1", *common]], [clean_env(SECRET)]), QUICK_TIMEOUT_S)
    assert time.monotonic() - start < QUICK_TIMEOUT_S
    code, out, err = results[0]
    assert code == _supervise.LAUNCH_FAILED, out + err
    assert err.splitlines()[-1] == (
        f"poprun: host 1: could not reach host 0's poprun at {address} within 2 s (--init-timeout or "
        f"{_env.INIT_TIMEOUT})"
    )
    results = finish(launchers([["--host-index", "0", *common]], [clean_env(SECRET)]), QUICK_TIMEOUT_S)
    code, out, err = results[0]
    assert code == _supervise.LAUNCH_FAILED, out + err
    assert "poprun: host 0: host(s) 1 did not join within 2 s" in err


def test_hosts_given_different_launches_refuse_them() -> None:
    address = f"127.0.0.1:{_start.free_port()}"
    common = ["--num-hosts", "2", "--coordinator-address", address, "--init-timeout", "30"]
    procs = launchers(
        [
            [*common, "--host-index", "0", "--num-instances", "2", "true"],
            [*common, "--host-index", "1", "--num-instances", "4", "true"],
        ],
        [clean_env(SECRET)] * 2,
    )
    for code, out, err in finish(procs, QUICK_TIMEOUT_S):
        assert code == _supervise.LAUNCH_FAILED, out + err
        assert "host 1's poprun was given another launch" in err
