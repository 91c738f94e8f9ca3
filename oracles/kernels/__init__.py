"""The oracles as kernel sets: `<family>.load(mode)` wraps the pure-Python definition in the
interface every backend's kernels share, so the registry serves it like any other backend."""
