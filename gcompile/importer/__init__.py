"""The ONNX importer: gc.load_onnx, an existing ONNX model as a traceable, differentiable callable.

load.py reads the model (OnnxModel, gc.load_onnx); inline.py runs its graph into the current trace
node by node, looking each op up in table.py's TRANSLATORS; translators/ fills that table, one
function per ONNX op written with gcompile ops; grad.py is `gcompile grad` (an ONNX model in, its
gradients as a standard ONNX model out).
"""
from . import translators  # noqa: F401  (fills table.TRANSLATORS before any model is inlined)
