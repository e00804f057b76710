"""gcompile: trace numeric Python, differentiate it symbolically to any order, export standard ONNX."""
from . import functions  # noqa: E402  (registers every op)
from .version import __version__  # noqa: E402
from .errors import GcompileError, InputError, LoweringError, ShapeError, TraceError, UnsupportedError  # noqa: E402
from .artifacts.marks import export, export_train  # noqa: E402
from .frontend import methods as _methods  # noqa: E402
from .frontend.spec import Spec, spec  # noqa: E402
from .frontend.tensor import Tensor  # noqa: E402
from .gradients import grad  # noqa: E402
from .gradients import transforms as _transforms  # noqa: E402
from .gradients.transforms import *  # noqa: E402,F401,F403
from .gradients import checkpoint as _checkpoint  # noqa: E402
from .gradients.checkpoint import *  # noqa: E402,F401,F403
from .frontend import onnx_import as _onnx_import  # noqa: E402
from .frontend.onnx_import import *  # noqa: E402,F401,F403
from . import optim  # noqa: E402
from .training.step import TrainStep, export_train_step  # noqa: E402
from . import runtime  # noqa: E402
from .runtime import CompiledFunction, compile  # noqa: E402

_methods.install()

__all__ = ["functions", "spec", "Spec", "Tensor", "grad", "compile", "CompiledFunction", "GcompileError",
           "InputError", "LoweringError", "ShapeError", "TraceError", "UnsupportedError", "__version__",
           "optim", "runtime", "export", *_transforms.__all__, *_checkpoint.__all__,
           *_onnx_import.__all__, "TrainStep", "export_train", "export_train_step"]
