#!/bin/sh
# Runs the sandbox integration tests as an unprivileged user (default: wtest).
# Usage (as root, from the workspace): warden-sandbox/tests/run-unprivileged.sh [user]
set -eu
user=${1:-wtest}
id "$user" >/dev/null 2>&1 || useradd -m "$user"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/work/target-sandbox}
cargo build -p warden-sandbox --bin warden-sandbox-run
dir=$(mktemp -d /tmp/warden-sandbox-tests.XXXXXX)
trap 'rm -rf "$dir"' EXIT
for t in sandbox landlock protected; do
  testbin=$(cargo test -p warden-sandbox --test "$t" --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*\/'"$t"'-[^"]*\)".*/\1/p' | tail -n 1)
  cp "$testbin" "$dir/$t-tests"
done
cp "$CARGO_TARGET_DIR/debug/warden-sandbox-run" "$dir/"
chmod 755 "$dir" "$dir"/*
cd /tmp
for t in sandbox landlock protected; do
  runuser -u "$user" -- env WARDEN_SANDBOX_RUN="$dir/warden-sandbox-run" "$dir/$t-tests"
done
