#!/usr/bin/env bash
# Sets up everything Dsync needs on this machine, idempotently: the wasm toolchain, wasm-pack,
# the wasm module, npm packages, the compiled CLI, the web client and (with `test`) Chromium, Firefox ESR,
# WebKitGTK, rsync, HAProxy, MinIO and versitygw.
# A second run skips what is done and takes seconds.
#   scripts/setup.sh        # for running the app
#   scripts/setup.sh test   # also what the tests need
#   scripts/setup.sh bench  # also what the benchmark needs (the baselines' wasm, zstd)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MODE=${1:-app}
log() { echo "[setup] $*" >&2; }
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH:/usr/local/go/bin"
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"

# Hash of the given files' contents, to decide whether a build step is stale.
stamp_of() { cat "$@" 2>/dev/null | sha256sum | cut -c1-16; }

node -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)' \
  || { echo "Node.js >= 20 is required" >&2; exit 1; }
command -v cargo >/dev/null || { echo "Rust (rustup) is required: https://rustup.rs" >&2; exit 1; }

# 1. wasm-pack and the wasm-bindgen CLI pinned by wasm/Cargo.lock, built in parallel.
WB_VERSION=$(grep -A1 '^name = "wasm-bindgen"$' wasm/Cargo.lock | sed -n 's/version = "\(.*\)"/\1/p')
pids=()
if ! command -v wasm-pack >/dev/null; then
  log "cargo install wasm-pack (a few minutes, once)"
  (cargo install wasm-pack --locked -q >/tmp/dsync-wasm-pack.log 2>&1 || { cat /tmp/dsync-wasm-pack.log >&2; exit 1; }) & pids+=($!)
fi
if [ "$(wasm-bindgen --version 2>/dev/null | cut -d' ' -f2)" != "$WB_VERSION" ]; then
  log "cargo install wasm-bindgen-cli $WB_VERSION (a few minutes, once)"
  # not --locked: its lock file pins a webpki-roots release some registries mirrors lack
  (cargo install wasm-bindgen-cli --version "$WB_VERSION" -q >/tmp/dsync-wasm-bindgen.log 2>&1 || { cat /tmp/dsync-wasm-bindgen.log >&2; exit 1; }) & pids+=($!)
fi

# 2. A toolchain with the wasm32 target (in parallel with the installs above).
TOOLCHAIN=$(scripts/wasm-toolchain.sh)
for p in "${pids[@]}"; do wait "$p"; done

# 3. The wasm module (wasm/pkg), rebuilt when the crate changes.
want=$(stamp_of wasm/Cargo.toml wasm/Cargo.lock wasm/.cargo/config.toml wasm/src/*.rs)
if [ "$(cat wasm/pkg/.stamp 2>/dev/null)" != "$want" ]; then
  log "wasm-pack build (toolchain: ${TOOLCHAIN:-default})"
  (cd wasm && RUSTUP_TOOLCHAIN=$TOOLCHAIN wasm-pack --quiet build --target web --release --no-pack >&2)
  # the same module without wasm SIMD, which the page loads where the browser lacks it (Safari
  # before 16.4: client/src/wasm-init.ts); one glue serves both
  log "wasm-pack build without SIMD"
  (cd wasm && RUSTUP_TOOLCHAIN=$TOOLCHAIN RUSTFLAGS="-C target-feature=-simd128" CARGO_TARGET_DIR=target/nosimd \
    wasm-pack --quiet build --target web --release --no-pack --out-dir target/pkg-nosimd -- --no-default-features >&2)
  cmp -s wasm/pkg/dsync_wasm.js wasm/target/pkg-nosimd/dsync_wasm.js || { echo "the wasm builds with and without SIMD differ in their glue" >&2; exit 1; }
  cp wasm/target/pkg-nosimd/dsync_wasm_bg.wasm wasm/pkg/dsync_wasm_nosimd_bg.wasm
  echo "$want" > wasm/pkg/.stamp
fi

# 3b. For the benchmark and the tests (`setup.sh bench|test`; the type check covers bench/): the baselines' wasm module (bench/baselines/pkg),
# which the page never loads.
if [ "$MODE" = bench ] || [ "$MODE" = test ]; then
  want=$(stamp_of bench/baselines/Cargo.toml bench/baselines/Cargo.lock bench/baselines/.cargo/config.toml bench/baselines/src/*.rs)
  if [ "$(cat bench/baselines/pkg/.stamp 2>/dev/null)" != "$want" ]; then
    log "wasm-pack build bench/baselines"
    (cd bench/baselines && RUSTUP_TOOLCHAIN=$TOOLCHAIN wasm-pack --quiet build --target web --release --no-pack >&2)
    echo "$want" > bench/baselines/pkg/.stamp
  fi
fi
# 3c. For the benchmark: zstd, whose --patch-from delta is the traffic floor its reports show.
if [ "$MODE" = bench ] && ! command -v zstd >/dev/null; then
  log "apt-get install zstd"
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq zstd >&2
fi

# 4. npm packages, reinstalled when package-lock.json changes.
want=$(stamp_of package-lock.json)
if [ "$(cat node_modules/.dsync-stamp 2>/dev/null)" != "$want" ]; then
  log "npm ci"
  npm ci --no-audit --no-fund --loglevel=error >&2
  echo "$want" > node_modules/.dsync-stamp
fi

# 4b. The compiled CLI (cli/dist, scripts/build-cli.mjs): `dsync` runs it while it is current
#     and starts without a TypeScript compiler; rebuilt when a file it was built from changed
#     (its stamp, cli/dist/build.json, holds each one's modification time).
node scripts/build-cli.mjs --if-stale

# 5. The web client (client/dist), rebuilt when its sources change.
if [ -f client/vite.config.ts ]; then
  want=$(stamp_of $(find client/src client/index.html client/vite.config.ts shared/src -type f | sort) wasm/pkg/.stamp)
  if [ "$(cat client/dist/.stamp 2>/dev/null)" != "$want" ]; then
    log "building the web client"
    npx vite build client --logLevel warn >&2
    echo "$want" > client/dist/.stamp
  fi
fi

# 6. For the tests: the three browser engines from Debian (Playwright cannot download browsers
#    here): Chromium, Firefox ESR, and WebKitGTK's WebDriver (with its MiniBrowser) and Xvfb to
#    run it in, and WebKitGTK's GObject bindings for Python (a persistent profile with OPFS); rsync, HAProxy (the load balancer of the end-to-end scale-out test), MinIO
#    (the S3 server of the tests) and versitygw (a second one for the backend contract).
if [ "$MODE" = test ]; then
  missing=()
  [ -x /usr/bin/chromium ] || missing+=(chromium)
  [ -x /usr/bin/firefox-esr ] || missing+=(firefox-esr)
  command -v WebKitWebDriver >/dev/null || missing+=(webkit2gtk-driver)
  command -v Xvfb >/dev/null || missing+=(xvfb)
  # WebKitGTK in a persistent profile with OPFS (e2e/engines/webkit-profile.py)
  /usr/bin/python3 -c "import gi; gi.require_version('WebKit2', '4.1')" 2>/dev/null || missing+=(python3-gi gir1.2-webkit2-4.1)
  command -v rsync >/dev/null || missing+=(rsync)
  command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
  if [ ${#missing[@]} -gt 0 ]; then
    log "apt-get install ${missing[*]}"
    $SUDO apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >&2
  fi
  want=$(stamp_of wasm/Cargo.toml wasm/Cargo.lock)
  if [ "$(cat wasm/target/.dsync-test-stamp 2>/dev/null)" != "$want" ]; then
    log "building the native tests"
    (cd wasm && cargo test --release --no-run -q >&2)
    echo "$want" > wasm/target/.dsync-test-stamp
  fi
  # MinIO from the Go module proxy, pinned so every machine tests against the same server
  # (this is what `@latest` resolved to when it was chosen); about 5 minutes, once.
  MINIO_MOD=github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c
  # ~/go/bin/minio, where harness/minio.ts looks (MINIO_BIN there overrides it).
  if [ "$(go version -m "$HOME/go/bin/minio" 2>/dev/null | awk '$1 == "mod" { print $2 "@" $3 }')" != "$MINIO_MOD" ]; then
    command -v go >/dev/null || { echo "Go is required to build MinIO for the tests: https://go.dev/dl" >&2; exit 1; }
    log "go install $MINIO_MOD (about 5 minutes, once)"
    GOBIN="$HOME/go/bin" go install "$MINIO_MOD" >&2
  fi
  # versitygw, a second S3 server with conditional writes, for the backend contract suite
  VERSITYGW=v1.8.0
  if [ "$(go version -m "$HOME/go/bin/versitygw" 2>/dev/null | awk '$1 == "mod" { print $2 "@" $3 }')" != "github.com/versity/versitygw@$VERSITYGW" ]; then
    command -v go >/dev/null || { echo "Go is required to build versitygw for the tests: https://go.dev/dl" >&2; exit 1; }
    log "go install github.com/versity/versitygw/cmd/versitygw@$VERSITYGW (about 3 minutes, once)"
    GOBIN="$HOME/go/bin" go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW" >&2
  fi
fi
log "ready"
