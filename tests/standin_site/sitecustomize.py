"""Put on PYTHONPATH by tests that run timm models in trial processes: installs the stand-in torchvision
there too (tests/torchvision_standin.py) when no usable torchvision is installed."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torchvision_standin import install_standin, torchvision_usable  # noqa: E402

if not torchvision_usable():
    install_standin()
