"""Lowering popxl programs to XLA through JAX: the only place the runtime executes.

`program.Program` is a whole Ir as one jitted step; `interpreter` traces graphs
op by op; `world` holds the state ops declare they read and write; `replicas`
and `placement` map replicas onto devices.
"""
