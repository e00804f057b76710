"""gcompile.functions (import as F): the op library users trace with.

Every function takes Tensors, numpy arrays or Python scalars, follows numpy's
broadcasting and axis conventions, and records nodes into the function being traced.
Each family module under gcompile/ops/ lists its public functions in `__all__`.
"""
from .ops import basic as _basic, conv as _conv, ctc as _ctc, elementwise as _elementwise  # noqa: I001
from .ops import indexing as _indexing, recurrent as _recurrent
from .ops import linalg as _linalg, nn as _nn, reduce as _reduce, shape as _shape
from .ops import arith as _arith, cumulative as _cumulative, nonfinite as _nonfinite, special as _special
from .ops import activations as _activations, sorting as _sorting, statistics as _statistics, trig as _trig
from .ops.activations import *  # noqa: F401,F403
from .ops.arith import *  # noqa: F401,F403
from .ops.basic import *  # noqa: F401,F403
from .ops.conv import *  # noqa: F401,F403
from .ops.ctc import *  # noqa: F401,F403
from .ops.cumulative import *  # noqa: F401,F403
from .ops.elementwise import *  # noqa: F401,F403
from .ops.indexing import *  # noqa: F401,F403
from .ops.linalg import *  # noqa: F401,F403
from .ops.nn import *  # noqa: F401,F403
from .ops.nonfinite import *  # noqa: F401,F403
from .ops.recurrent import *  # noqa: F401,F403
from .ops.reduce import *  # noqa: F401,F403
from .ops.shape import *  # noqa: F401,F403
from .ops.sorting import *  # noqa: F401,F403
from .ops.special import *  # noqa: F401,F403
from .ops.statistics import *  # noqa: F401,F403
from .ops.trig import *  # noqa: F401,F403

__all__ = [name for module in (_basic, _elementwise, _reduce, _linalg, _shape, _indexing, _conv, _nn,
                                _recurrent, _ctc, _nonfinite, _cumulative, _trig, _arith, _special, _activations,
                                _statistics, _sorting)
           for name in module.__all__]
