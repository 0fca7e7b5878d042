#!/usr/bin/env bash
# Install cosearch with its test extras and run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -e ".[test]"
python3 -m pytest -q "$@"
