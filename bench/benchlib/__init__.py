"""What the benchmark scripts in ``bench/`` share: the live bench, process statistics, options.

Benchmark-only code lives here, next to the scripts, not in the installed package: the
product's processes never import it. Scripts import it as ``benchlib`` (their folder is on
``sys.path``); the tests do through pytest's ``pythonpath``.
"""
