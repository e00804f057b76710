"""gcompile.functions (import as F): the op library users trace with.

Every function takes Tensors, numpy arrays or Python scalars, follows numpy's
broadcasting and axis conventions, and records nodes into the function being traced.
Each family module under gcompile/ops/ lists its public functions in `__all__`.
"""
from .ops import basic, conv, elementwise, indexing, linalg, nn, reduce, shape
from .ops.basic import *  # noqa: F401,F403
from .ops.conv import *  # noqa: F401,F403
from .ops.elementwise import *  # noqa: F401,F403
from .ops.indexing import *  # noqa: F401,F403
from .ops.linalg import *  # noqa: F401,F403
from .ops.nn import *  # noqa: F401,F403
from .ops.reduce import *  # noqa: F401,F403
from .ops.shape import *  # noqa: F401,F403

__all__ = [name for module in (basic, elementwise, reduce, linalg, shape, indexing, conv, nn) for name in module.__all__]
