"""Builds the krcore Python package (cffi over krcore's C headers; needs a C compiler
and Python's headers). From a clone, `make python` builds its sdist and wheel and
installs the wheel into a virtual environment; by hand:

    python3 -m venv --system-site-packages ENV   # Debian's cffi and setuptools
    ENV/bin/pip install --no-build-isolation ./uring-lib/python

Inside the repository the headers are copied into the package first, so an sdist
carries them and builds anywhere.
"""
import os
import shutil

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
HEADERS = ["abi/include/krcore_abi.h", "abi/include/krcore_reasons.h", "uring-lib/c/krcore.h"]

if all(os.path.exists(os.path.join(ROOT, h)) for h in HEADERS):
    vendored = os.path.join(HERE, "krcore", "include")
    os.makedirs(vendored, exist_ok=True)
    for h in HEADERS:
        shutil.copy2(os.path.join(ROOT, h), vendored)

setup(cffi_modules=["krcore/_build.py:ffi"])
