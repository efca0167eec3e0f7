"""Lowering popxl programs to XLA through JAX: the only place the runtime executes.

`program.Program` is a whole Ir as one jitted step; `interpreter` traces graphs
op by op; `world` holds the state ops declare they read and write; `replicas`
and `placement` map replicas onto devices; `memory_fit` (over `fit`'s arithmetic)
and `check_program` check a run's memory and indices before it runs;
`host_values` holds a Session's host values and their custody.
"""
