"""What gpupool installs into a cluster: the CRDs, RBAC roles and the admission policy."""
