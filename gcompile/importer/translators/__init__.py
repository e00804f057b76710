"""The importer's translators: one function per ONNX op, written with gcompile ops.

Each module registers its translators in table.TRANSLATORS (with @onnx_op) when imported; this is
the one place that imports them all, and gcompile.importer imports it.
"""
from . import (  # noqa: F401
    attention,
    bitwise,
    control,
    elementwise,
    indexing,
    nn,
    pooling,
    quantize,
    random,
    reduce,
    resize,
    rnn,
    sampling,
    sequence,
    shape,
    signal,
    text,
    transformer,
)
