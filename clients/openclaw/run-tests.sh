#!/usr/bin/env bash
# Build and test the OpenClaw plugin (used by CI).
#   npm ci (npm install when there is no lock file), then npm test, which
#   compiles with tsc and runs node's test runner over dist/test/.
# The integration test needs redis-server and the Python service
# (OVSTREAM_BIN, default ../../.venv/bin/ovstream); it is skipped when they
# are missing unless OVSTREAM_REQUIRE_INTEGRATION=1.
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "run-tests.sh: node and npm are required (Node >= 24.16, the OpenClaw host's)" >&2
  exit 1
fi
major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$major" -lt 24 ]; then
  echo "run-tests.sh: Node >= 24 is required, found $(node --version)" >&2
  exit 1
fi

if [ -f package-lock.json ]; then
  npm ci --no-audit --no-fund
else
  npm install --no-audit --no-fund
fi
npm test
