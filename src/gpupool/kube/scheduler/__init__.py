"""Scheduling execution, live: the loop, its cache and queue, preemption, Bindings and Events."""
