"""What we know of NVIDIA GPUs, below both the passes and code generation: the devices'
numbers, the architectures, and the reduction facts that depend on them."""
