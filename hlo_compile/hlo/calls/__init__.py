"""The library calls XLA:GPU writes, read into typed records: one reader per family
(cuBLAS GEMMs, cuDNN convolutions and attention, Transformer Engine's attention, FFT,
triangular solves), the call targets by family, what the libraries take, and the
annotation calls that are identities."""
