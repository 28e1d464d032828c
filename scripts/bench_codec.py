#!/usr/bin/env python
"""Codec benchmark (same as `ibp-graph bench codec`): fraction and CPU speed per family."""
import sys

from ibp_graph.benchmarks.codec import main

if __name__ == "__main__":
    sys.exit(main())
