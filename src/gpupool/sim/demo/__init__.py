"""``gpupool demo``: the bundled workload on the embedded simulated cluster, stepped live.

The embedded cluster steps the policy engine on simulated nodes (:mod:`.embedded`), fed the
bundled workload (:mod:`.workload`) by one session (:mod:`.session`); what its agents would
publish (:mod:`.contention`) and its GPU-hours per hour (:mod:`.hourly`) feed the dashboard.
"""
