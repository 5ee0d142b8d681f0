// Playwright in Debian's Chromium (Playwright cannot download browsers here), headless, two
// spec files at a time, each test against its own real server (e2e/server.ts).
import { defineConfig } from '@playwright/test';

export const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];

export default defineConfig({
  testDir: '.',
  // the core flows in every engine run under node:test (engines/core.test.ts)
  testIgnore: 'engines/**',
  globalSetup: './global-setup.ts',
  timeout: 180_000,
  // a hang fails the run instead of outlasting CI's limit
  globalTimeout: 30 * 60_000,
  expect: { timeout: 15_000 },
  workers: 2,
  retries: 0,
  reporter: [['list']],
  outputDir: '../test-results',
  use: {
    headless: true,
    launchOptions: { executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium', args: CHROMIUM_ARGS },
    viewport: { width: 1280, height: 800 },
    acceptDownloads: true,
  },
});
