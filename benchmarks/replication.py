"""An all-reduce-heavy program with 8 replicas: one replica per device (shard_map) vs all replicas
simulated on one device (vmap), measured side by side."""

from __future__ import annotations

import argparse

import jax

jax.config.update("jax_num_cpu_devices", 8)

import numpy as np  # noqa: E402
from common import add_out_option, interleaved, plot_ratios, save  # noqa: E402

import popxl  # noqa: E402
from popxl import ops  # noqa: E402

REPLICAS = 8


def program(size: int, layers: int) -> tuple[popxl.Ir, popxl.HostToDeviceStream, popxl.DeviceToHostStream]:
    ir = popxl.Ir(replication=REPLICAS)
    with ir.main_graph:
        h = popxl.h2d_stream((size, size), popxl.float32, "x")
        d = popxl.d2h_stream((size, size), popxl.float32, "y")
        w = popxl.variable(np.eye(size, dtype=np.float32), name="w")
        groupings = [ir.replica_grouping(1, 8), ir.replica_grouping(1, 2), ir.replica_grouping(2, 4)]

        def body(x: popxl.Tensor, w: popxl.Tensor) -> popxl.Tensor:
            for g in groupings:
                x = ops.collectives.replicated_all_reduce(ops.tanh(x @ w), "mean", group=g)
            return x

        layer = ir.create_graph(body, h.spec, w.spec)
        (y,) = ops.repeat(layer, layers, ops.host_load(h), w)
        ops.host_store(d, y)
    return ir, h, d


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--size", type=int, default=256, help="width of the all-reduced matrices")
    p.add_argument("--layers", type=int, default=8, help="rounds of three all-reduces")
    p.add_argument("--repeats", type=int, default=15, help="timed repeats, interleaved")
    add_out_option(p)
    args = p.parse_args()
    x = np.random.default_rng(0).normal(size=(REPLICAS, args.size, args.size)).astype(np.float32)
    sessions, streams = {}, {}
    for mode in ("devices", "simulate"):
        ir, h, d = program(args.size, args.layers)
        sessions[mode] = popxl.Session(ir, "cpu", replica_mode=mode).__enter__()
        streams[mode] = (h, d)
    outs = {m: s.run({streams[m][0]: x})[streams[m][1]] for m, s in sessions.items()}
    np.testing.assert_allclose(outs["devices"], outs["simulate"], rtol=1e-5, atol=1e-6)
    times = interleaved({m: (lambda m=m: sessions[m].run({streams[m][0]: x})) for m in sessions}, args.repeats)
    figures = {
        "replicas": REPLICAS,
        "devices_visible": len(jax.devices()),
        "cpu_cores": __import__("os").cpu_count(),
        "devices_s": times["devices"],
        "simulate_s": times["simulate"],
        "ratio_devices_over_simulate": times["devices"] / times["simulate"],
    }
    path = save("replication", figures, args.out)
    print(
        f"8 replicas, {args.layers} x 3 all-reduces of {args.size}x{args.size}: "
        f"devices {times['devices'] * 1e3:.1f} ms, simulate {times['simulate'] * 1e3:.1f} ms, "
        f"devices / simulate = {figures['ratio_devices_over_simulate']:.3f}"
    )
    print(f"written to {path}")
    groups = {"8 replicas": {"one device per replica / simulated": figures["ratio_devices_over_simulate"]}}
    print(f"picture in {plot_ratios('replication', 'Replica modes', groups, out=args.out)}")


if __name__ == "__main__":
    main()
