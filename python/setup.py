"""chorus_torch: chorus as a torch.distributed backend.

    pip install ./python            # builds libchorus from the tree first, if needed
    CHORUS_LIB=build/lib/libchorus.a CHORUS_INCLUDE=include python3 setup.py build   # what make does

The extension links libchorus statically and keeps its symbols to itself,
so torch's own NCCL (loaded by its CUDA build) never answers chorus's calls.
"""
import os
import subprocess

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def chorus_paths():
    inc, lib = os.environ.get("CHORUS_INCLUDE"), os.environ.get("CHORUS_LIB")
    if inc and lib:
        return os.path.abspath(inc), os.path.abspath(lib)
    inc = os.path.join(ROOT, "include")
    for build in (os.path.join(ROOT, "build"), os.path.join(HERE, "build-chorus")):
        lib = os.path.join(build, "lib", "libchorus.a")
        if os.path.exists(lib):
            return inc, lib
    if not os.path.exists(os.path.join(ROOT, "CMakeLists.txt")):
        raise RuntimeError("chorus_torch: set CHORUS_INCLUDE and CHORUS_LIB (libchorus.a) to build outside chorus's tree")
    build = os.path.join(HERE, "build-chorus")
    subprocess.check_call(["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release"])
    subprocess.check_call(["cmake", "--build", build, "--target", "chorus_static", "-j", str(os.cpu_count() or 2)])
    return inc, os.path.join(build, "lib", "libchorus.a")


def private_libs(lib):
    """What a static link of libchorus.a needs besides (hwloc, libdl): the
    Libs.private of the chorus.pc beside its build, else CHORUS_LIBS."""
    pc = os.path.join(os.path.dirname(os.path.dirname(lib)), "chorus.pc")
    if os.path.exists(pc):
        with open(pc) as f:
            for line in f:
                if line.startswith("Libs.private:"):
                    return line.split(":", 1)[1].split()
    return os.environ.get("CHORUS_LIBS", "-lpthread -lm -ldl").split()


inc, lib = chorus_paths()
sources = [os.path.join("csrc", f) for f in ("module.cpp", "backend.cpp", "group.cpp", "work.cpp", "completion.cpp", "convert.cpp", "flight.cpp", "pyexit.cpp")]

setup(
    name="chorus_torch",
    version="0.1.0",
    description="chorus (NCCL's API on host memory) as a torch.distributed backend",
    packages=["chorus_torch"],
    ext_modules=[
        CppExtension(
            "chorus_torch._C",
            sources,
            include_dirs=[inc],
            extra_compile_args=["-O2", "-g0", "-fvisibility=hidden"],
            extra_objects=[lib],
            depends=[lib],  # relink when libchorus.a changes
            extra_link_args=["-Wl,--exclude-libs,libchorus.a", "-pthread"] + private_libs(lib),
        )
    ],
    cmdclass={"build_ext": BuildExtension},
    entry_points={
        "torch.backends": ["chorus = chorus_torch:_autoload"],
        "torch.distributed.backends": ["chorus = chorus_torch:_autoload"],
    },
    python_requires=">=3.9",
)
