#!/usr/bin/env bash
# Before/after: run one bench script from a git revision and from this tree,
# alternating, N times each, on the same venv and machine.
#   bench/ab.sh REV SCRIPT [RUNS] [-- ARGS...]      e.g. bench/ab.sh a52198a bench/assemble.py 3
# Prints each run's output prefixed "before" / "after".
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rev="$1"; script="$2"; runs="${3:-3}"; shift 3 || shift $#
[ "${1:-}" = "--" ] && shift
before="$(mktemp -d)/before"
git -C "$ROOT" worktree add -q --detach "$before" "$rev"
trap 'git -C "$ROOT" worktree remove --force "$before"' EXIT
for _ in $(seq "$runs"); do
  (cd "$before" && "$ROOT/.venv/bin/python" "$script" "$@" 2>&1 | sed 's/^/before /')
  (cd "$ROOT" && .venv/bin/python "$script" "$@" 2>&1 | sed 's/^/after /')
done
