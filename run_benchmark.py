#!/usr/bin/env python
"""FedMM-Bench command line (see `python run_benchmark.py --help`)."""

import sys

from fedmm_bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
