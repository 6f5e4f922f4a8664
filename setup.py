"""Builds ember's C core and its CPython binding with nothing but a C
compiler: src/*.c and ember/_ext.c become one extension module, ember._ext.
src/prelude.h (the runtime header of generated kernels) is embedded as a C
string first, by tools/embed.py."""
import glob
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
GEN = os.path.join("build", "gen")


class BuildExt(build_ext):
    def run(self):
        sys.path.insert(0, os.path.join(HERE, "tools"))
        from embed import embed
        embed(os.path.join(HERE, "src", "prelude.h"), os.path.join(HERE, GEN, "prelude_gen.h"))
        embed(os.path.join(HERE, "src", "prelude_cuda.h"), os.path.join(HERE, GEN, "prelude_cuda_gen.h"),
              "em_prelude_cuda")
        super().run()


ext = Extension(
    "ember._ext",
    sources=sorted(glob.glob("src/*.c")) + ["ember/_ext.c"],
    include_dirs=["include", "src", GEN],
    extra_compile_args=["-std=gnu11", "-O2", "-Wall", "-Wno-unused-parameter", "-fvisibility=hidden"],
    libraries=["dl", "m", "pthread"],
)

setup(ext_modules=[ext], cmdclass={"build_ext": BuildExt})
