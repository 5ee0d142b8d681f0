#!/usr/bin/env node
// The `dsync` command (package.json "bin"): runs cli/main.ts through tsx's loader.
import { register } from 'tsx/esm/api';

register();
await import('../cli/main.ts');
