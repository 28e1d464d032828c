"""`ibp-graph`: the command line (demo, bench)."""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence


def _demo(argv: Sequence[str]) -> int:
    from .benchmarks.demo import main

    return main(argv)


def _bench(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="ibp-graph bench")
    p.add_argument("what", choices=["codec", "loader"], help="which benchmark")
    a, rest = p.parse_known_args(argv)
    if a.what == "codec":
        from .benchmarks.codec import main
    else:
        from .benchmarks.loader import main
    return main(rest)


COMMANDS = {
    "demo": (_demo, "encode and decode a generated papers100M-like feature table; print fraction and speed"),
    "bench": (_bench, "run a benchmark (codec, loader): prints a table, writes JSON"),
}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the `ibp-graph` command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: ibp-graph COMMAND [options]\n\ncommands:")
        for name, (_, text) in COMMANDS.items():
            print(f"  {name:8s} {text}")
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"ibp-graph: unknown command {name!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    return COMMANDS[name][0](rest)


if __name__ == "__main__":
    sys.exit(main())
