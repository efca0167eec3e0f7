"""The GPT-style decoder of `examples/gpt_phased.py` as a module: its config, layers, phased and un-phased
programs, data and training, for that script, the examples' tests and the benchmarks to import.

`examples/gpt_phased.py` describes the model, the replica layout and the phased training step. Importing the
package asks JAX for 8 CPU devices, one per replica, which holds where JAX has not started yet.
"""

from gpt_model.config import Array, Config, Groupings
from gpt_model.data import initial_weights, per_replica, phased_feeds, synthetic_batches
from gpt_model.layers import GPT, Attention, DecoderLayer, Embeddings, FeedForward, Head
from gpt_model.optimizer import adam_step, global_norm, reduce_and_square, tp_sharded
from gpt_model.phased import over_layers, phased_program, phased_variable
from gpt_model.stage import Remote, Row, Stage, build_stage, shard_groups, shard_spec
from gpt_model.training import make_session, train
from gpt_model.unphased import unphased_program

__all__ = [
    "GPT",
    "Array",
    "Attention",
    "Config",
    "DecoderLayer",
    "Embeddings",
    "FeedForward",
    "Groupings",
    "Head",
    "Remote",
    "Row",
    "Stage",
    "adam_step",
    "build_stage",
    "global_norm",
    "initial_weights",
    "make_session",
    "over_layers",
    "per_replica",
    "phased_feeds",
    "phased_program",
    "phased_variable",
    "reduce_and_square",
    "shard_groups",
    "shard_spec",
    "synthetic_batches",
    "tp_sharded",
    "train",
    "unphased_program",
]
