"""The stand-in torchvision for tests and benchmarks: re-exported from memprobe.workloads.torchvision_guard.

Where no usable torchvision is installed at all, `install_standin()` lets timm import; any use of a
torchvision name raises, so code that runs with it provably ran no torchvision code.
"""

from memprobe.workloads.torchvision_guard import (  # noqa: F401
    StandInFinder,
    forget,
    install_standin,
    torchvision_usable,
)
