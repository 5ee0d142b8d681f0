// The page-vs-CLI benchmark (bench/browser/page-vs-cli.bench.ts) with the e2e tests' browser
// settings: Debian's Chromium, headless, one test at a time.
import { defineConfig } from '@playwright/test';
import e2e from '../../e2e/playwright.config.ts';

export default defineConfig({
  ...e2e,
  testDir: '.',
  testMatch: '*.bench.ts',
  globalSetup: '../../e2e/global-setup.ts',
  outputDir: '../../test-results',
  timeout: 1_800_000,
});
