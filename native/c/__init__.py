"""C kernels (one <family>.c/.h per op family), built and cached through cffi by `build`."""
