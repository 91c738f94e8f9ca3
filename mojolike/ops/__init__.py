"""The op families' public API: one module per family (`fold`, `crmath`, `loss`, `layers`,
`schedule`, `rng`) plus the chunked LM head (`head`, on the layers and crmath kernels)."""
