"""Running test code in several threads at once, with Python switching between them as often as it
can, so that a missing lock or a shared frame shows in a short run."""
import sys
import threading
from collections.abc import Callable, Sequence


def run_interleaved(targets: Sequence[Callable[[], object]], interval: float = 1e-6) -> None:
    """Start one thread per target, wait for all, and restore the switch interval."""
    threads = [threading.Thread(target=t) for t in targets]
    previous = sys.getswitchinterval()
    sys.setswitchinterval(interval)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(previous)
