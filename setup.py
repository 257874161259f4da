"""Builds the sluice Python package for pip (pip install --no-build-isolation .).

The extension, sluice._sluice, and libsluice.so, which it links, come from the project's CMake
build: build_ext configures it (into build-pip/cmake, or $SLUICE_CMAKE_BUILD_DIR), builds the
sluice_python target for this interpreter, and copies the extension and libsluice.so.N into the
package, where the extension finds the library through its $ORIGIN rpath. The pure-Python
modules, the type stubs (*.pyi) and py.typed come from python/sluice.
"""

import os
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext as _build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.join(ROOT, "build-pip")
# What an earlier build left in setuptools' staging directory would go into this wheel too
# (a module since removed): it starts empty. The CMake build directory is kept, for speed.
shutil.rmtree(os.path.join(BUILD, "setuptools"), ignore_errors=True)
os.makedirs(BUILD, exist_ok=True)


def _version():
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        m = re.search(r"project\(\s*sluice\s+VERSION\s+([0-9.]+)", f.read())
    if not m:
        raise RuntimeError("no project(sluice VERSION ...) in CMakeLists.txt")
    return m.group(1)


class CMakeBuildExt(_build_ext):
    """Builds sluice._sluice with CMake instead of compiling sources itself."""

    def build_extension(self, ext):
        build_dir = os.path.abspath(os.environ.get("SLUICE_CMAKE_BUILD_DIR")
                                    or os.path.join(BUILD, "cmake"))
        build_type = os.environ.get("SLUICE_CMAKE_BUILD_TYPE", "RelWithDebInfo")
        jobs = os.environ.get("SLUICE_CMAKE_JOBS") or str(os.cpu_count() or 1)
        configure = ["cmake", "-S", ROOT, "-B", build_dir,
                     f"-DCMAKE_BUILD_TYPE={build_type}",
                     f"-DSLUICE_PYTHON_EXECUTABLE={sys.executable}",
                     # The extension finds libsluice.so.N beside itself, in the package.
                     "-DSLUICE_PYTHON_WHEEL=ON"]
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", build_dir, "--target", "sluice_python",
                        "--parallel", jobs], check=True)

        pkg = os.path.join(build_dir, "python", "sluice")
        suffix = self.get_ext_filename("_sluice")
        built = os.path.join(pkg, suffix)
        if not os.path.exists(built):
            raise RuntimeError(f"the CMake build made no {built} (is python3-dev installed "
                               "for this interpreter, and python3-numpy?)")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built, dest)
        shutil.copymode(built, dest)
        # libsluice.so.N (the extension's DT_NEEDED, its SONAME), the file itself.
        lib_dir = os.path.join(build_dir, "lib")
        sonames = [n for n in os.listdir(lib_dir) if re.fullmatch(r"libsluice\.so\.[0-9]+", n)]
        if len(sonames) != 1:
            raise RuntimeError(f"expected one libsluice.so.N in {lib_dir}, found {sonames}")
        lib_dest = os.path.join(os.path.dirname(dest), sonames[0])
        shutil.copyfile(os.path.realpath(os.path.join(lib_dir, sonames[0])), lib_dest)
        shutil.copymode(os.path.realpath(os.path.join(lib_dir, sonames[0])), lib_dest)


setup(
    name="sluice",
    version=_version(),
    description="sluice: a distributed input-data service for machine-learning training",
    python_requires=">=3.9",
    install_requires=["numpy"],
    package_dir={"": "python"},
    packages=["sluice"],
    package_data={"sluice": ["py.typed", "*.pyi"]},
    ext_modules=[Extension("sluice._sluice", sources=[])],
    cmdclass={"build_ext": CMakeBuildExt},
    # Out of the way of the CMake build directories (build/ is the usual one).
    options={"build": {"build_base": os.path.join(BUILD, "setuptools")},
             "egg_info": {"egg_base": os.path.relpath(BUILD, ROOT)}},
    zip_safe=False,
)
