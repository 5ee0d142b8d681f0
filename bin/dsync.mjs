#!/usr/bin/env node
// The `dsync` command (package.json "bin"): runs the compiled CLI (cli/dist/main.mjs, which
// scripts/setup.sh builds with scripts/build-cli.mjs) when it is current, so that a command
// starts without a TypeScript compiler. Without it, or when a source changed since it was
// built, runs cli/main.ts through tsx's loader and says so.
import { compiledCli } from '../scripts/build-cli.mjs';

const compiled = compiledCli();
if (compiled.entry) {
  await import(compiled.entry);
} else {
  if (!process.env.DSYNC_FROM_SOURCES) {
    console.error(`dsync: running from the TypeScript sources, slower to start: ${compiled.stale} (node scripts/build-cli.mjs builds it)`);
    // said once: a `serve --workers` worker runs this file again
    process.env.DSYNC_FROM_SOURCES = '1';
  }
  const { register } = await import('tsx/esm/api');
  register();
  await import('../cli/main.ts');
}
