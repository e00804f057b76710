"""Import torchvision beside PyTorch's CPU build.

torchvision 0.28's wheel carries a compiled library built for CUDA PyTorch; beside the CPU build
(torch==2.13.0, which the tools pin) that library fails to load, so its custom operators (nms,
roi_align, ...) are never defined, and the fake-kernel registrations in torchvision's
`_meta_registrations` raise "operator torchvision::nms does not exist" at import. The models need
none of those operators: `import_torchvision()` skips just those registrations and imports it.
"""
from __future__ import annotations


def import_torchvision():
    import torch.library

    register_fake = torch.library.register_fake

    def tolerant(op, func=None, /, **kwargs):
        if not (isinstance(op, str) and op.startswith("torchvision::")):
            return register_fake(op, func, **kwargs) if func is not None else register_fake(op, **kwargs)

        def register(f):
            try:
                return register_fake(op, **kwargs)(f)
            except RuntimeError:            # the operator's library did not load: nothing to register for
                return f
        return register(func) if func is not None else register

    torch.library.register_fake = tolerant
    try:
        import torchvision
    finally:
        torch.library.register_fake = register_fake
    return torchvision
