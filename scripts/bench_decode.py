#!/usr/bin/env python
"""Receiver-side decode benchmark (same as `ibp-graph bench decode`): gathered rows decoded, GB/s."""
import sys

from ibp_graph.benchmarks.decode import main

if __name__ == "__main__":
    sys.exit(main())
