"""One-off studies: each answered one question of one issue, and bench/HISTORY.md keeps
its figures. None is part of `python -m bench.run` or the documented benchmarks
(bench/README.md), and nothing outside this folder imports them (bench/test_layout.py).
Each still runs from the repository root: `python -m bench.studies.<name> --help`.
"""
