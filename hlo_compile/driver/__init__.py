"""The driver: the stages as data, the one loop that runs them (pipeline), the persistent
kernel cache, canonical kernel names, XLA's dump names, IR/PTX overrides, and what the
runtime runs outside kernels (checked before anything is emitted)."""
