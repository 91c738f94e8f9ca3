"""Contracts: the texts (`<suite>.md`), their cases, the harness that writes cards.

Each suite module (`fold`, ...) names its profile, builds its cases from
`casegen` streams, lists its outputs, and brings its own extra clauses and
negative controls; `harness` runs any suite on any backend.
"""

from ..core.families import FAMILIES

SUITES = (*FAMILIES, "step", "train", "distributed")  # a suite per family, then the whole-step ones
