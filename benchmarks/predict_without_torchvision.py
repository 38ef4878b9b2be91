"""`memprobe predict` for the timm workloads on a machine without a usable torchvision.

timm imports torchvision when its package loads, but resnet50's and nasnetalarge's model code never
calls it. An installed torchvision that cannot load (the PyPI CUDA wheel on CPU torch) memprobe now
replaces by itself (memprobe/workloads/torchvision_guard.py); this script covers a machine with no
torchvision installed at all (this project's development venv): it runs `memprobe predict ARGS...` with
the same stand-in (any use of it raises, so a prediction that completes ran no torchvision code).
With a working torchvision it is the plain command.

    python benchmarks/predict_without_torchvision.py --model resnet50 --compare reports/h100/<file>.json
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from torchvision_standin import install_standin, torchvision_usable  # noqa: E402

if __name__ == "__main__":
    if not torchvision_usable():
        install_standin()
        print("(torchvision stand-in installed: timm imports, and any torchvision call would raise)", file=sys.stderr)
    from memprobe.cli import main

    main(args=["predict", *sys.argv[1:]], prog_name="memprobe")
