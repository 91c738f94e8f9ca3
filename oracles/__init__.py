"""Exact pure-Python definitions: the spec every kernel is compared to, bit for bit."""
