// Playwright in Debian's Chromium (Playwright cannot download browsers here), headless, against
// a real server started by each test (e2e/server.ts).
import { defineConfig } from '@playwright/test';

export const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];

export default defineConfig({
  testDir: '.',
  timeout: 240_000,
  workers: 1,
  reporter: [['list']],
  outputDir: '../test-results',
  use: {
    headless: true,
    launchOptions: { executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium', args: CHROMIUM_ARGS },
    viewport: { width: 1280, height: 800 },
    acceptDownloads: true,
  },
});
