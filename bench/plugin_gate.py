"""The plugin version check of assemble's lane (workers.rpc.plugins), per call: judging the
``X-Ovstream-Plugin`` header afresh (decode, two version parses) against the verdict remembered
per header value, on one header a fleet sends. Prints both and their ratio, measured in one run.

    .venv/bin/python bench/plugin_gate.py [--calls N]
"""

from __future__ import annotations

import argparse
import timeit

from core import defaults
from workers.rpc import plugins


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=200_000)
    args = parser.parse_args()
    header = b"0.4.0"

    def afresh() -> object:
        return plugins.refusal(header.decode("latin-1").strip())

    def remembered() -> object:
        return plugins.verdict(header, defaults.MIN_PLUGIN_VERSION)

    per_call = {}
    for name, call in (("afresh", afresh), ("remembered", remembered)):
        best = min(timeit.repeat(call, number=args.calls, repeat=5))  # the least disturbed of five
        per_call[name] = best / args.calls * 1e6
    ratio = per_call["afresh"] / per_call["remembered"]
    afresh_us, remembered_us = per_call["afresh"], per_call["remembered"]
    print(f"plugin check per call: afresh {afresh_us:.2f} us, remembered {remembered_us:.2f} us, ratio {ratio:.1f}")


if __name__ == "__main__":
    main()
