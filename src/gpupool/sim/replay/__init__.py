"""The placement benchmark: the FGD paper's replay protocol on the openb traces.

Arrivals only, in the published order, inflated and replayed through the scheduler
(:mod:`.protocol`, :mod:`.run`), many seeds per policy and trace (:mod:`.sweep`), per-event
metrics binned by arrived load (:mod:`.metrics`), where the unallocated GPUs are at arrived = 100%
(:mod:`.unallocated`) and the LP floor no policy can beat (:mod:`.packing_lp`), and their plots
(:mod:`.plot`).
"""
