#!/usr/bin/env python
"""Sharded feature tables benchmark (same as `ibp-graph bench sharded`): rows from other ranks raw
(identity) vs compressed (auto, auto + remote-row cache), optionally inside a rate-limited namespace."""
import sys

from ibp_graph.benchmarks.sharded import main

if __name__ == "__main__":
    sys.exit(main())
