"""Installs the krcore Python package: `pip install uring-lib/python` (needs a C
compiler, cffi and the krcore headers of this repository)."""
from setuptools import setup

setup(cffi_modules=["krcore/_build.py:ffi"])
