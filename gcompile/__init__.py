"""gcompile: trace numeric Python, differentiate it symbolically to any order, export standard ONNX."""
from . import functions  # registers every op before anything traces
from .version import __version__
from .errors import GcompileError, InputError, LoweringError, ShapeError, TraceError, UnsupportedError
from .artifacts.marks import export, export_train
from .ops import methods as _methods
from .frontend.spec import Spec, spec
from .frontend.tensor import Tensor
from .gradients import grad
from .gradients import transforms as _transforms
from .gradients.transforms import *  # noqa: F401,F403
from .gradients import checkpoint as _checkpoint
from .gradients.checkpoint import *  # noqa: F401,F403
from .ops.control import fori_loop, scan, while_loop
from .importer import load as _load
from .importer.load import *  # noqa: F401,F403
from . import optim
from .training.step import TrainStep, export_train_step
from . import runtime
from .runtime import CompiledFunction, compile

_methods.install()

__all__ = ["functions", "spec", "Spec", "Tensor", "grad", "compile", "CompiledFunction", "GcompileError",
           "InputError", "LoweringError", "ShapeError", "TraceError", "UnsupportedError", "__version__",
           "optim", "runtime", "export", "scan", "fori_loop", "while_loop", *_transforms.__all__, *_checkpoint.__all__,
           *_load.__all__, "TrainStep", "export_train", "export_train_step"]
