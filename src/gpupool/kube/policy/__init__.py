"""Policy control, live: GPUPool and GPUQueue objects in, the compiled policy and status out."""
