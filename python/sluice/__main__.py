"""python3 -m sluice --version: the version of the sluice package (and of the libsluice it was
built from)."""

import argparse
import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    """Parses argv (None: the command line) and runs it; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python3 -m sluice",
        description="The sluice Python package. The service itself runs as sluice-dispatcher "
                    "and sluice-worker (or sluice.DispatchServer and sluice.WorkerServer); "
                    "pipelines are run and read with the sluice command or from Python.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    args = parser.parse_args(argv)
    if args.version:
        import sluice
        print(f"sluice {sluice.__version__}")
        return 0
    parser.print_usage(sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
