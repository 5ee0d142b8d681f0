#!/usr/bin/env bash
# Makes a Rust toolchain that can build wasm32-unknown-unknown available, and prints its
# name for RUSTUP_TOOLCHAIN (empty = rustup's default). Order (docs/wasm-toolchain.md in the
# shared docs): an installed target, then `rustup target add` with a short timeout (a normal
# machine with internet), then Debian's rustc-web + rust-web-src, building the wasm32 standard
# library once with -Z build-std. Idempotent: every step is skipped when already done.
set -euo pipefail
log() { echo "[wasm-toolchain] $*" >&2; }

if rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
  echo ""; exit 0
fi
if [ -d /usr/lib/rustlib/wasm32-unknown-unknown/lib ] && ls /usr/lib/rustlib/wasm32-unknown-unknown/lib/libstd-*.rlib >/dev/null 2>&1 \
   && rustup toolchain list | grep -q '^system-web'; then
  echo "system-web"; exit 0
fi
if [ -z "${DSYNC_SKIP_RUSTUP_TARGET:-}" ] && [ ! -f /tmp/.dsync-rustup-target-failed ]; then
  log "trying: rustup target add wasm32-unknown-unknown (60 s limit)"
  if timeout 60 rustup target add wasm32-unknown-unknown >&2 2>&1; then echo ""; exit 0; fi
  touch /tmp/.dsync-rustup-target-failed
  log "rustup could not fetch the target; using Debian's rustc-web"
fi

SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
if ! dpkg -s rustc-web rust-web-src lld-22 >/dev/null 2>&1; then
  log "apt-get install rustc-web cargo-web rust-web-src lld-22"
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq rustc-web cargo-web rust-web-src lld-22 >&2
fi
if ! ls /usr/lib/rustlib/wasm32-unknown-unknown/lib/libstd-*.rlib >/dev/null 2>&1; then
  log "building the wasm32 standard library from rust-web-src (about a minute)"
  tmp=$(mktemp -d)
  mkdir -p "$tmp/src"
  printf '[package]\nname = "stdbuild"\nversion = "0.0.0"\nedition = "2021"\n[lib]\ncrate-type = ["cdylib"]\n' > "$tmp/Cargo.toml"
  echo '' > "$tmp/src/lib.rs"
  (cd "$tmp" && env -u RUSTUP_TOOLCHAIN PATH=/usr/bin:/bin RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc RUSTC_BOOTSTRAP=1 /usr/bin/cargo build --release --target wasm32-unknown-unknown \
      -Z build-std=std,panic_abort,panic_unwind >&2)
  $SUDO mkdir -p /usr/lib/rustlib/wasm32-unknown-unknown/lib
  $SUDO cp "$tmp"/target/wasm32-unknown-unknown/release/deps/lib*.rlib /usr/lib/rustlib/wasm32-unknown-unknown/lib/
  rm -rf "$tmp"
fi
rustup toolchain list | grep -q '^system-web' || rustup toolchain link system-web /usr >&2
echo "system-web"
