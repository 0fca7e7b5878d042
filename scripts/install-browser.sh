#!/usr/bin/env bash
# Install headless Chromium and its WebDriver from Debian packages (for tests/test_browser.py).
# Idempotent: does nothing when both are already present. Needs root (or sudo) and apt-get.
# Never downloads a browser from anywhere but the distribution's archive.
set -euo pipefail

have() { command -v "$1" >/dev/null 2>&1; }
browser() { have chromium || have chromium-browser; }
driver() { have chromedriver || [ -x /usr/bin/chromedriver ]; }

if browser && driver; then
    exit 0
fi

if ! have apt-get; then
    echo "install-browser.sh: apt-get not found; install Chromium and chromedriver with your package manager" >&2
    exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if have sudo; then SUDO="sudo -n"; else
        echo "install-browser.sh: needs root (or sudo) to run apt-get" >&2
        exit 1
    fi
fi

export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# Package lists are often absent in containers; refresh them first (retry once on a flaky mirror).
for attempt in 1 2; do
    if $SUDO apt-get update -q >"$log" 2>&1 \
        && $SUDO apt-get install -y -q --no-install-recommends chromium chromium-driver fonts-liberation >>"$log" 2>&1; then
        break
    fi
    if [ "$attempt" = 2 ]; then
        echo "install-browser.sh: apt-get failed to install chromium, chromium-driver:" >&2
        tail -n 20 "$log" >&2
        exit 1
    fi
    sleep 5
done

if ! browser || ! driver; then
    echo "install-browser.sh: chromium or chromedriver still missing after apt-get install" >&2
    exit 1
fi
