"""The six published placement policies (FGD paper, USENIX ATC 2023), formula by formula.

Every score is truncated to an integer in 0..100 exactly as the authors' Go plugins do, because
the truncation creates the ties that the fixed node order then breaks, and that tie-breaking is
part of each policy's measured behaviour. See ``placement-benchmark.md`` section 3.
"""
