"""Run every benchmark in turn: `make bench` (or `python -m bench NAME ...` for some)."""

import importlib
import sys

ALL = ["runtime", "orm", "portal", "history", "model", "e2e"]


def main() -> None:
    names = sys.argv[1:] or ALL
    for name in names:
        module = importlib.import_module(f"bench.{name}")
        print(f"=== bench.{name}", flush=True)
        module.main()


if __name__ == "__main__":
    main()
