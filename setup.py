"""Builds the C++17 automaton behind its Cython bindings.

RACER_SANITIZE=1 builds with AddressSanitizer and UndefinedBehaviorSanitizer
(scripts/sanitize.sh); otherwise -O3.
"""

import os
from glob import glob

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup

sanitize = os.environ.get("RACER_SANITIZE") == "1"
compile_args = ["-std=c++17"]
link_args: list[str] = []
if sanitize:
    flags = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"]
    compile_args += ["-O1", "-g", *flags]
    link_args += flags
else:
    compile_args += ["-O3"]

extension = Extension(
    "racer_core.drafting.automaton._automaton",
    sources=["racer_core/drafting/automaton/_automaton.pyx", "racer_core/drafting/automaton/automaton.cpp",
             "racer_core/drafting/automaton/top_k.cpp"],
    include_dirs=["racer_core/drafting/automaton", np.get_include()],
    language="c++",
    extra_compile_args=compile_args,
    extra_link_args=link_args,
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
)

# The tree policy's estimates and choice (racer_core/budget/tree_choice.cpp): no
# contraction into fused multiply-adds, so its floats are the Python reference's.
choice = Extension(
    "racer_core.budget._tree_choice",
    sources=["racer_core/budget/_tree_choice.pyx", "racer_core/budget/tree_choice.cpp"],
    include_dirs=["racer_core/budget", np.get_include()],
    depends=["racer_core/budget/tree_choice.hpp"],
    language="c++",
    extra_compile_args=[*compile_args, "-ffp-contract=off"],
    extra_link_args=link_args,
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
)

quant = Extension(
    "racer_core.models.formats.quant._quant",
    sources=["racer_core/models/formats/quant/_quant.pyx", "racer_core/models/formats/quant/quant.cpp",
             "racer_core/models/formats/quant/quant_avx2.cpp", "racer_core/models/formats/quant/quant_avx512.cpp",
             "racer_core/models/formats/quant/quant_vnni.cpp", "racer_core/models/formats/quant/quant_avxvnni.cpp",
             "racer_core/models/formats/quant/layer.cpp",
             "racer_core/verify/attention_kernel.cpp"],
    include_dirs=["racer_core/models/formats/quant", "racer_core/verify", np.get_include()],
    depends=sorted(glob("racer_core/models/formats/quant/*.hpp") + glob("racer_core/verify/*.h*")),  # rebuilt when a header changes
    language="c++",
    extra_compile_args=[*compile_args, "-fopenmp", "-ffp-contract=off"],
    extra_link_args=[*link_args, "-fopenmp", "-pthread"],
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
)

# Batch-invariant attention (racer_core/verify/attention.py): no contraction into
# fused multiply-adds the source does not write, so its two paths agree bit for bit.
attention = Extension(
    "racer_core.verify._attention",
    sources=["racer_core/verify/_attention.pyx", "racer_core/verify/attention_kernel.cpp"],
    include_dirs=["racer_core/verify"],
    language="c++",
    extra_compile_args=[*compile_args, "-ffp-contract=off", "-pthread", "-fopenmp"],
    extra_link_args=[*link_args, "-pthread", "-fopenmp"],
)

# A sampled row's largest scores and mass (racer_core/verify/kept_tokens.py).
row_scan = Extension(
    "racer_core.verify._row_scan",
    sources=["racer_core/verify/_row_scan.pyx", "racer_core/verify/row_scan.cpp"],
    include_dirs=["racer_core/verify", np.get_include()],
    depends=["racer_core/verify/row_scan.hpp"],
    language="c++",
    extra_compile_args=[*compile_args, "-ffp-contract=off"],
    extra_link_args=link_args,
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
)

setup(ext_modules=cythonize([extension, choice, quant, attention, row_scan], language_level=3, compiler_directives={"boundscheck": False, "wraparound": False}))
