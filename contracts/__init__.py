"""Contracts: the texts (`<suite>.md`), their cases, the harness that writes cards.

Each suite module (`fold`, ...) names its profile, builds its cases from
`casegen` streams, lists its outputs, and brings its own extra clauses and
negative controls; `harness` runs any suite on any backend.
"""

SUITES = ("fold", "optim", "crmath", "loss", "schedule", "rng", "layers", "step", "train",
          "distributed")
