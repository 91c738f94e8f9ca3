"""Training on the certified ops: the tape, the reference model and data, the trainer, its
checkpoints and its command line. Public paths: `mojolike.train`, `mojolike.models`,
`mojolike.data`, `mojolike.Tape`."""
