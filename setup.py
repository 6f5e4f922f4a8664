"""Builds ember's C core and its CPython binding with nothing but a C
compiler: src/*.c and ember/_ext.c become one extension module, ember._ext.
src/prelude_c.h and src/prelude_cuda.h (the runtime headers of generated
kernels, each with the shared src/prelude.h) are embedded as C strings
first, by tools/embed.py.

Every input is in the source tree and in the sdist (MANIFEST.in lists them);
the metadata is in pyproject.toml."""
import glob
import importlib.util
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
GEN = os.path.join("build", "gen")


def _embed_module():
    """tools/embed.py, loaded from its path (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location("ember_embed", os.path.join(HERE, "tools", "embed.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class BuildExt(build_ext):
    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:          # compile the C files on every CPU unless -j says otherwise
            self.parallel = os.cpu_count() or 1

    def run(self):
        embed = _embed_module().embed
        embed(os.path.join(HERE, "src", "prelude_c.h"), os.path.join(HERE, GEN, "prelude_gen.h"))
        embed(os.path.join(HERE, "src", "prelude_cuda.h"), os.path.join(HERE, GEN, "prelude_cuda_gen.h"),
              "em_prelude_cuda")
        super().run()


ext = Extension(
    "ember._ext",
    sources=sorted(glob.glob("src/*.c")) + ["ember/_ext.c"],
    # a changed header or op table rebuilds the extension too
    depends=sorted(glob.glob("src/*.h") + glob.glob("src/*.def") + glob.glob("include/*.h")),
    include_dirs=["include", "src", GEN],
    extra_compile_args=["-std=gnu11", "-O2", "-Wall", "-Wno-unused-parameter", "-fvisibility=hidden"],
    libraries=["dl", "m", "pthread"],
)

setup(ext_modules=[ext], cmdclass={"build_ext": BuildExt})
