"""gc.optim: the optimizers of training steps, defined in gcompile.training.optim."""
from .training.optim import *  # noqa: F401,F403
from .training.optim import __all__  # noqa: F401
