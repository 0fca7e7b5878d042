#!/usr/bin/env bash
# Install cosearch with its test extras and run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -e ".[test]"
# headless Chromium for tests/test_browser.py (Debian packages; quiet, and only when missing)
if ! { command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; } \
    || ! command -v chromedriver >/dev/null 2>&1; then
    bash scripts/install-browser.sh
fi
# servers the tests need (PostgreSQL, Chromium) must be there: a failure to start one fails, not skips
export COSEARCH_REQUIRE_SERVERS=1
python3 -m pytest -q "$@"
