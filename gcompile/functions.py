"""gcompile.functions (import as F): the op library users trace with.

Every function takes Tensors, numpy arrays or Python scalars, follows numpy's
broadcasting and axis conventions, and records nodes into the function being traced.
Each family module under gcompile/ops/ lists its public functions in `__all__`.
"""
import sys as _sys  # noqa: I001

from .ops import basic as _basic, conv as _conv, ctc as _ctc, elementwise as _elementwise
from .ops import indexing as _indexing, rearrange as _rearrange, recurrent as _recurrent
from .ops import linalg as _linalg, nn as _nn, reduce as _reduce, scatter as _scatter, shape as _shape
from .ops import attention as _attention, linalg_extra as _linalg_extra, losses as _losses
from .ops import normalization as _normalization, spatial as _spatial
from .ops import methods as _methods
from .ops.attention import *  # noqa: F401,F403
from .ops.basic import *  # noqa: F401,F403
from .ops.conv import *  # noqa: F401,F403
from .ops.ctc import *  # noqa: F401,F403
from .ops.elementwise import *  # noqa: F401,F403
from .ops.indexing import *  # noqa: F401,F403
from .ops.linalg import *  # noqa: F401,F403
from .ops.linalg_extra import *  # noqa: F401,F403
from .ops.losses import *  # noqa: F401,F403
from .ops.nn import *  # noqa: F401,F403
from .ops.normalization import *  # noqa: F401,F403
from .ops.rearrange import *  # noqa: F401,F403
from .ops.recurrent import *  # noqa: F401,F403
from .ops.reduce import *  # noqa: F401,F403
from .ops.scatter import *  # noqa: F401,F403
from .ops.shape import *  # noqa: F401,F403
from .ops.spatial import *  # noqa: F401,F403

__all__ = [name for module in (_basic, _elementwise, _reduce, _linalg, _shape, _indexing, _conv, _nn,
                                _recurrent, _ctc, _rearrange, _scatter, _spatial, _linalg_extra, _losses,
                                _normalization, _attention)
           for name in module.__all__]

_methods.install(_sys.modules[__name__])   # Tensor operators (x + y, x @ w, x.sum()) and numpy hooks, from this library
