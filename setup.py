"""Build torch_graphfuse: the Python package plus the `_C` extension, built by CMake.

Build against the torch that is installed (`pip install --no-build-isolation`):
an isolated build environment would fetch a different torch to compile against.
The CMake build directory `build/` persists, so rebuilds are incremental.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
# The kernels and the ops a saved model calls, with no Python in it (CMakeLists.txt).
RUNTIME = "libgraphfuse_runtime.so"


class CMakeExtension(Extension):
    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        target = Path(self.get_ext_fullpath(ext.name)).resolve()
        build_dir = ROOT / "build" / "cmake"
        build_dir.mkdir(parents=True, exist_ok=True)
        editable = self.editable_mode or self.inplace
        # An editable install imports the package from the source tree: CMake puts
        # the extension there itself, so a later `cmake --build` alone refreshes it.
        out_dir = ROOT / "torch_graphfuse" if editable else target.parent
        configure = [
            "cmake", "-S", str(ROOT), "-B", str(build_dir), "-G", "Ninja",
            f"-DPython3_EXECUTABLE={sys.executable}",
            f"-DGRAPHFUSE_OUTPUT_DIR={out_dir}",
        ]
        subprocess.run(configure, check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        subprocess.run(["cmake", "--build", str(build_dir), "-j", jobs], check=True)
        # The extension and the runtime library it links (found beside it: $ORIGIN).
        for built, wanted in ((out_dir / target.name, target),
                              (out_dir / RUNTIME, target.parent / RUNTIME)):
            if built != wanted:  # setuptools copies from its build dir into the tree
                wanted.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(built, wanted)

setup(
    name="torch_graphfuse",
    version="0.1.0",
    description="TorchScript fuser plugin: fused regions run by oneDNN Graph (CPU) and cuDNN (GPU)",
    packages=find_packages(include=["torch_graphfuse", "torch_graphfuse.*"]),
    ext_modules=[CMakeExtension("torch_graphfuse._C")],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.10",
    install_requires=["torch"],
)
