#!/usr/bin/env python
"""Feature-mode benchmark: one loader epoch per way of feeding node features (worker, zero-copy, cache, resident)."""
import sys

from ibp_graph.benchmarks.features import main

if __name__ == "__main__":
    sys.exit(main())
