"""The dynamic simulation: arrivals and completions over hours, under pools and queues.

Poisson arrivals with trace shapes and heavy-tailed durations (:mod:`.workload_process`), shares
of the workload as gangs or with pod rules (:mod:`.gang_arrivals`, :mod:`.pod_rules`), bursty
usage and the governance rules acting on it (:mod:`.usage_model`, :mod:`.governance_model`), the
run itself (:mod:`.simulation`) and what it measures over its window (:mod:`.metrics`).
"""
