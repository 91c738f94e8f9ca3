"""Kernels: numba on the CPU (this package's modules), C through cffi (`c/`), numba CUDA (`cuda/`)."""
