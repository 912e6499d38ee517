"""The Kubernetes backend: what turns the pure core into a scheduler of real pods.

An informer cache (paginated list, watch, relist on 410) feeds slim records of nodes and pods;
the live scheduler builds the same :class:`~gpupool.core.snapshot.ClusterSnapshot` the simulator
uses from them and turns decisions into Bindings (with the allocation annotated in the same
call), Events and pod conditions. Leader election on a Lease keeps one active replica.
"""
