"""The GPT decoder of examples/gpt_phased.py written in JAX directly, for the benchmarks to measure popxl against.

Weights are named as the popxl model names them. The decoder layers are either unrolled (`layer<i>.<name>`,
as the un-phased popxl model holds them) or one `lax.scan` over stacked weights (`layers.<name>`, each with
a leading layer axis), as a JAX model of many layers is usually written: it compiles one layer.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp

if TYPE_CHECKING:  # the example's model config; importing it would set up JAX's CPU devices
    from gpt_model import Config

Params = dict[str, jax.Array]
AdamState = tuple[Params, Params, jax.Array]

# The layer weights and whether each is a matrix (drawn at random) or a layer norm's scale (ones); the rest
# (biases, layer norms' shifts) start at zero.
LAYER_WEIGHTS = {
    "ln1.weight": "ones", "ln1.bias": "zeros", "attention.qkv.weight": "normal", "attention.qkv.bias": "zeros",
    "attention.out.weight": "normal", "attention.bias": "zeros", "ln2.weight": "ones", "ln2.bias": "zeros",
    "feed_forward.up.weight": "normal", "feed_forward.up.bias": "zeros", "feed_forward.down.weight": "normal",
    "feed_forward.bias": "zeros",
}  # fmt: skip


def layer_shapes(config: Config) -> dict[str, tuple[int, ...]]:
    """The shape of each weight of one decoder layer."""
    w = config.width
    shapes = {"qkv.weight": (w, 3 * w), "qkv.bias": (3 * w,), "out.weight": (w, w), "up.weight": (w, 4 * w)}
    shapes |= {"up.bias": (4 * w,), "down.weight": (4 * w, w)}
    return {name: shapes.get(name.split(".", 1)[1], (w,)) for name in LAYER_WEIGHTS}


def parameters(config: Config) -> int:
    """The model's parameter count."""
    per_layer = sum(math.prod(s) for s in layer_shapes(config).values())
    return (
        config.vocab * config.width
        + config.sequence * config.width
        + config.layers * per_layer
        + (2 * config.width + config.width * config.vocab)
    )


def init_stacked(key: jax.Array, config: Config, dtype: Any, std: float = 0.02) -> Params:
    """Random weights with the layers stacked (`layers.<name>`), made on the default device."""
    keys = iter(jax.random.split(key, 3 + len(LAYER_WEIGHTS)))
    w, n = config.width, config.layers

    def make(kind: str, shape: tuple[int, ...]) -> jax.Array:
        if kind == "normal":
            return (std * jax.random.normal(next(keys), shape, jnp.float32)).astype(dtype)
        return (jnp.ones if kind == "ones" else jnp.zeros)(shape, dtype)

    p = {
        "embeddings.word.weight": make("normal", (config.vocab, w)),
        "embeddings.positional": make("zeros", (config.sequence, w)),
        "head.ln.weight": make("ones", (w,)),
        "head.ln.bias": make("zeros", (w,)),
        "head.logits.weight": make("normal", (w, config.vocab)),
    }
    for name, shape in layer_shapes(config).items():
        p[f"layers.{name}"] = make(LAYER_WEIGHTS[name], (n, *shape))
    return p


def adam_state(p: Params, dtype: Any) -> AdamState:
    """Zero Adam moments (the first in `dtype`, the second in float32, as the popxl optimizer keeps them)."""
    first = jax.tree.map(lambda w: jnp.zeros(w.shape, dtype), p)
    return first, jax.tree.map(lambda w: jnp.zeros(w.shape, jnp.float32), p), jnp.zeros((), jnp.float32)


def _layer_norm(x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
    x32 = x.astype(jnp.float32)
    mean = x32.mean(-1, keepdims=True)
    var = ((x32 - mean) ** 2).mean(-1, keepdims=True)
    return ((x32 - mean) / jnp.sqrt(var + 1e-5)).astype(x.dtype) * w + b


def decoder_layer(x: jax.Array, p: Params, mask: jax.Array, heads: int) -> jax.Array:
    """One pre-norm layer on (micro, sequence, width), its weights named as in `LAYER_WEIGHTS`."""
    micro, seq, width = x.shape
    head = width // heads
    h = _layer_norm(x, p["ln1.weight"], p["ln1.bias"])
    qkv = h @ p["attention.qkv.weight"] + p["attention.qkv.bias"]
    qh, kh, vh = (t.reshape(micro, seq, heads, head).transpose(0, 2, 1, 3) for t in jnp.split(qkv, 3, -1))
    scores = (qh @ kh.transpose(0, 1, 3, 2)).astype(jnp.float32) * (1 / math.sqrt(head))
    probs = jax.nn.softmax(scores + mask, axis=-1).astype(x.dtype)
    z = (probs @ vh).transpose(0, 2, 1, 3).reshape(micro, seq, width)
    x = x + z @ p["attention.out.weight"] + p["attention.bias"]
    h = _layer_norm(x, p["ln2.weight"], p["ln2.bias"])
    up = jax.nn.gelu(h @ p["feed_forward.up.weight"] + p["feed_forward.up.bias"], approximate=True)
    return x + up @ p["feed_forward.down.weight"] + p["feed_forward.bias"]


def _prefixed(p: Params, prefix: str) -> Params:
    return {k.removeprefix(prefix): v for k, v in p.items() if k.startswith(prefix)}


def loss(p: Params, tokens: jax.Array, labels: jax.Array, config: Config) -> jax.Array:
    """Mean next-token cross-entropy (float32) of one micro-batch: (micro, sequence) tokens, flat labels."""
    micro, seq = tokens.shape
    x = p["embeddings.word.weight"][tokens] + p["embeddings.positional"]
    mask = jnp.triu(jnp.full((seq, seq), -1e4, jnp.float32), 1)
    if any(k.startswith("layers.") for k in p):
        x, _ = jax.lax.scan(lambda h, q: (decoder_layer(h, q, mask, config.heads), None), x, _prefixed(p, "layers."))
    else:
        for i in range(config.layers):
            x = decoder_layer(x, _prefixed(p, f"layer{i}."), mask, config.heads)
    h = _layer_norm(x.reshape(micro * seq, config.width), p["head.ln.weight"], p["head.ln.bias"])
    logits = (h @ p["head.logits.weight"]).astype(jnp.float32)
    picked = jnp.take_along_axis(jax.nn.log_softmax(logits, -1), labels[:, None], axis=-1)
    return -picked.mean()


def train_step(
    p: Params, adam: AdamState, tokens: jax.Array, labels: jax.Array, config: Config
) -> tuple[Params, AdamState, jax.Array]:
    """One training step: the mean loss-scaled gradient over the micro-batches (a scan), then the clipped Adam."""
    scale = config.loss_scaling

    def body(acc: Params, batch: tuple[jax.Array, jax.Array]) -> tuple[Params, jax.Array]:
        value, grads = jax.value_and_grad(lambda q: loss(q, *batch, config) * scale)(p)
        return jax.tree.map(lambda a, g: a + g.astype(a.dtype), acc, grads), value / scale

    zeros = jax.tree.map(jnp.zeros_like, p)
    total, losses = jax.lax.scan(body, zeros, (tokens, labels))
    grads = jax.tree.map(lambda g: g.astype(jnp.float32) / (tokens.shape[0] * scale), total)
    norm = jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree.leaves(grads)))
    clip = config.clip / jnp.maximum(norm, config.clip)
    first, second, t = adam
    t = t + 1
    b1, b2, eps = 0.9, 0.999, 1e-5
    first = jax.tree.map(lambda m, g: (b1 * m + (1 - b1) * g * clip).astype(m.dtype), first, grads)
    second = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * (g * clip) ** 2, second, grads)

    def update(w: jax.Array, m: jax.Array, v: jax.Array) -> jax.Array:
        m_hat = m.astype(jnp.float32) / (1 - b1**t)
        v_hat = v / (1 - b2**t)
        updated: jax.Array = (w - config.lr * m_hat / (jnp.sqrt(v_hat) + eps)).astype(w.dtype)
        return updated

    p = jax.tree.map(update, p, first, second)
    return p, (first, second, t), losses.mean()
