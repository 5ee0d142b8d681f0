// `npm run screenshots`: the pictures in docs/ (file browser, a batch in progress, a version
// history; desktop and phone), taken of the built page against a real server. Not part of
// `npm test`, which writes nothing into the clone.
import { defineConfig } from '@playwright/test';
import base from './playwright.config.ts';

export default defineConfig({ ...base, testMatch: 'screenshots.shot.ts' });
