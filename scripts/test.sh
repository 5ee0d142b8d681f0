#!/usr/bin/env bash
# Sets everything up (idempotently) and runs every test: native Rust, type checks, Node unit and
# integration tests against real servers on loopback ports, Playwright in Chromium, and the
# page's core flows in Chromium, Firefox and WebKit (e2e/engines).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
scripts/setup.sh test
t0=$(date +%s)
step() { echo; echo "=== $* ($(( $(date +%s) - t0 )) s)"; }

step "native tests (cargo test, wasm/ and the benchmark's baselines)"
(cd wasm && cargo test --release -q)
(cd bench/baselines && cargo test --release -q)

step "type check (tsc)"
npx tsc --noEmit -p .

# Each test has 600 s (the longest, the session fuzzer, takes 1–3 min): a hang fails the run with the test's name instead of outlasting CI.
# Three files at once: most of a file's time is waiting (its servers, MinIO, child processes,
# fsync), and every test holds on a loaded machine (issue 48), so the files share the cores.
step "Node tests (shared/, server/, cli/; npm run test:fast runs the quick part)"
node --import tsx --test --test-reporter=spec --test-concurrency=3 --test-timeout=600000 shared/test/*.test.ts server/test/*.test.ts cli/test/*.test.ts client/test/*.test.ts

step "browser tests (Playwright, Chromium)"
npx playwright test -c e2e/playwright.config.ts

step "browser tests in every engine: the core flows in Chromium, Firefox ESR and WebKitGTK; kept copies in a persistent WebKit profile"
node --import tsx --test --test-reporter=spec --test-concurrency=1 --test-timeout=600000 e2e/engines/core.test.ts e2e/engines/webkit-profile.test.ts
step "all tests passed"
