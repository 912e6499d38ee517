"""The ``gpupool control-plane`` process: scheduler, governance, HTTP endpoints, metrics."""
