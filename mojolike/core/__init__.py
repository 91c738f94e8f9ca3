"""The core every layer stands on: the registry, argument checks, refusals, fallbacks, the
floating-point state check and the card format. It imports no op, optimizer or kernel."""
