"""Host arrays under poprun are sized by the instance's replicas, as in popxl (`Session._full_input_shape`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from popdist import _env

import popxl

WORKER = Path(__file__).with_name("poprun_layout_worker.py")
# Bounded for a loaded machine: nothing here may hang.
RUN_TIMEOUT_S = 240


def test_one_local_replica_has_no_replica_axis() -> None:
    # Two replicas in the program, one in this process: popxl adds no replica axis.
    layout = popxl.HostLayout(num_host_transfers=2, replication_factor=2, local_replicas=1)
    assert layout.shape((3,)) == (2, 3)
    assert layout.accepts((3,), (2, 3)) and not layout.accepts((3,), (2, 1, 3))
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    program = layout.to_replica_major(data)
    assert program.shape == (1, 2, 3)
    np.testing.assert_array_equal(layout.from_replica_major(program), data)
    np.testing.assert_array_equal(layout.from_transfers_major(data[:, None]), data)
    single = popxl.HostLayout(num_host_transfers=1, replication_factor=4, local_replicas=1)
    assert single.shape((3,)) == (3,)
    # Two local replicas keep the axis, sized by them, not by the program's four.
    assert popxl.HostLayout(1, 4, 2).shape((3,)) == (2, 3)


@pytest.mark.slow
def test_two_instances_with_one_replica_each_feed_arrays_without_a_replica_axis() -> None:
    env = {k: v for k, v in os.environ.items() if k not in _env.ALL}
    result = subprocess.run(
        [sys.executable, "-m", "popdist.launcher", "--num-instances", "2", "--num-replicas", "2",
         "--init-timeout", "200", sys.executable, str(WORKER)],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    for i in range(2):
        assert f"[1,{i}]<stdout>:instance {i} ok: host arrays (2, 3) in, (2, 3) out" in result.stdout.splitlines()
