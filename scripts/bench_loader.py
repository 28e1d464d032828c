#!/usr/bin/env python
"""Loader benchmark (same as `ibp-graph bench loader`): ibp vs identity vs pre-encoded store."""
import sys

from ibp_graph.benchmarks.loader import main

if __name__ == "__main__":
    sys.exit(main())
