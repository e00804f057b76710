"""gcompile.functions (import as F): the op library users trace with.

Every function takes Tensors, numpy arrays or Python scalars, follows numpy's
broadcasting and axis conventions, and records nodes into the function being traced.
"""
from .ops.basic import add_n, cast, constant, full, identity, ones_like, stop_gradient, zeros_like
from .ops.elementwise import (abs, add, ceil, clip, cos, divide, elu, equal, erf, exp, expm1, floor, gelu, greater,
                              greater_equal, leaky_relu, less, less_equal, log, log1p, logical_and, logical_not,
                              logical_or, maximum, minimum, multiply, negative, not_equal, pow, power, relu, round,
                              rsqrt, selu, sigmoid, sign, silu, sin, softplus, sqrt, square, subtract, tan, tanh,
                              where)
from .ops.linalg import einsum, linear, matmul
from .ops.reduce import logsumexp, max, mean, min, prod, sum, sum_to_shape
from .ops.shape import broadcast_to, expand_dims, flatten, ravel, reshape, squeeze, swapaxes, transpose

__all__ = [
    "add_n", "cast", "constant", "full", "identity", "ones_like", "stop_gradient", "zeros_like",
    "abs", "add", "ceil", "clip", "cos", "divide", "elu", "equal", "erf", "exp", "expm1", "floor", "gelu", "greater",
    "greater_equal", "leaky_relu", "less", "less_equal", "log", "log1p", "logical_and", "logical_not", "logical_or",
    "maximum", "minimum", "multiply", "negative", "not_equal", "pow", "power", "relu", "round", "rsqrt", "selu",
    "sigmoid", "sign", "silu", "sin", "softplus", "sqrt", "square", "subtract", "tan", "tanh", "where",
    "einsum", "linear", "matmul",
    "logsumexp", "max", "mean", "min", "prod", "sum", "sum_to_shape",
    "broadcast_to", "expand_dims", "flatten", "ravel", "reshape", "squeeze", "swapaxes", "transpose",
]
