"""gcompile.functions (import as F): the op library users trace with.

Every function takes Tensors, numpy arrays or Python scalars, follows numpy's
broadcasting and axis conventions, and records nodes into the function being traced.
Each family module under gcompile/ops/ lists its public functions in `__all__`; this module
re-exports them all and installs Tensor's operators and numpy hooks from them.
"""
import sys as _sys  # noqa: I001

from .ops import activations as _activations, attention as _attention, basic as _basic, division as _division
from .ops import conv as _conv, ctc as _ctc, cumulative as _cumulative, elementwise as _elementwise, floats as _floats
from .ops import indexing as _indexing, linalg as _linalg, losses as _losses, matrices as _matrices
from .ops import nn as _nn, nonfinite as _nonfinite, normalization as _normalization, rearrange as _rearrange
from .ops import random as _random, recurrent as _recurrent, reduce as _reduce, scatter as _scatter, shape as _shape
from .ops import solvers as _solvers, sorting as _sorting, spatial as _spatial, special as _special
from .ops import quantize as _quantize, statistics as _statistics, trig as _trig
from .ops import methods as _methods
from .ops.activations import *  # noqa: F401,F403
from .ops.attention import *  # noqa: F401,F403
from .ops.basic import *  # noqa: F401,F403
from .ops.conv import *  # noqa: F401,F403
from .ops.ctc import *  # noqa: F401,F403
from .ops.division import *  # noqa: F401,F403
from .ops.cumulative import *  # noqa: F401,F403
from .ops.elementwise import *  # noqa: F401,F403
from .ops.floats import *  # noqa: F401,F403
from .ops.indexing import *  # noqa: F401,F403
from .ops.linalg import *  # noqa: F401,F403
from .ops.losses import *  # noqa: F401,F403
from .ops.matrices import *  # noqa: F401,F403
from .ops.nn import *  # noqa: F401,F403
from .ops.nonfinite import *  # noqa: F401,F403
from .ops.normalization import *  # noqa: F401,F403
from .ops.quantize import *  # noqa: F401,F403
from .ops.rearrange import *  # noqa: F401,F403
from .ops.recurrent import *  # noqa: F401,F403
from .ops.reduce import *  # noqa: F401,F403
from .ops.scatter import *  # noqa: F401,F403
from .ops.shape import *  # noqa: F401,F403
from .ops.solvers import *  # noqa: F401,F403
from .ops.sorting import *  # noqa: F401,F403
from .ops.spatial import *  # noqa: F401,F403
from .ops.special import *  # noqa: F401,F403
from .ops.statistics import *  # noqa: F401,F403
from .ops.trig import *  # noqa: F401,F403
# families added for the ONNX importer's breadth (issue 45 items 1-2)
from .ops import bitwise as _bitwise
from .ops.bitwise import *  # noqa: F401,F403

_FAMILIES = (_basic, _elementwise, _reduce, _linalg, _shape, _indexing, _conv, _nn, _recurrent, _ctc, _rearrange,
             _scatter, _spatial, _matrices, _solvers, _losses, _normalization, _attention, _nonfinite, _cumulative,
             _trig, _division, _floats, _special, _activations, _statistics, _sorting, _random,
             _bitwise, _quantize)
__all__ = [name for module in _FAMILIES for name in module.__all__]

# PyTorch's ops and the decompositions of issue #45 (item 4): the families they add
from .ops import decompositions as _decompositions  # noqa: E402
from .ops import differences as _differences  # noqa: E402
from .ops import margin_losses as _margin_losses  # noqa: E402
from .ops import order_statistics as _order_statistics  # noqa: E402
from .ops import unpooling as _unpooling  # noqa: E402
from .ops import view_scatter as _view_scatter  # noqa: E402
from .ops.decompositions import *  # noqa: E402,F401,F403
from .ops.differences import *  # noqa: E402,F401,F403
from .ops.margin_losses import *  # noqa: E402,F401,F403
from .ops.order_statistics import *  # noqa: E402,F401,F403
from .ops.unpooling import *  # noqa: E402,F401,F403
from .ops.view_scatter import *  # noqa: E402,F401,F403

__all__ += [name for module in (_decompositions, _differences, _margin_losses, _order_statistics, _unpooling,
                                _view_scatter) for name in module.__all__]

_methods.install(_sys.modules[__name__])   # Tensor operators (x + y, x @ w, x.sum()) and numpy hooks, from this library
