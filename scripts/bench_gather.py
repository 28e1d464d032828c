#!/usr/bin/env python
"""Raw row gather benchmark (same as `ibp-graph bench gather`): gather_rows vs torch.index_select."""
import sys

from ibp_graph.benchmarks.gather import main

if __name__ == "__main__":
    sys.exit(main())
