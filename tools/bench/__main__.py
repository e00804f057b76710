"""`python -m tools.bench` from the repository's root."""
import sys

if __package__:
    from .cli import main
else:   # `python tools/bench`: the folder run as a script
    import os
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from bench.cli import main

sys.exit(main())
