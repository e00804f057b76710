"""The importer's translators: one function per ONNX op, written with gcompile ops.

Each module registers its translators in table.TRANSLATORS (with @onnx_op) when imported; this is
the one place that imports them all, and gcompile.importer imports it.
"""
from . import attention, control, elementwise, indexing, nn, quantize, reduce, resize, rnn, sequence, shape  # noqa: F401
