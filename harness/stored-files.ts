// Every file under a server's data folder with its bytes, for the tests that search what a
// server stores (e2e/vault.spec.ts, e2e/vault-leak.spec.ts, shared/test/vault-e2e.test.ts).
// The server may still be finishing a request as they look (a journal entry removed once its
// change is committed): a file gone between the listing and its read is no longer stored, and
// is left out.
import { readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';

const gone = (e: unknown) => (e as NodeJS.ErrnoException).code === 'ENOENT';

/** Every file under `dir`: its path below `dir` and its bytes. */
export function storedFiles(dir: string): { file: string; bytes: Buffer }[] {
  const out: { file: string; bytes: Buffer }[] = [];
  const walk = (p: string) => {
    let names: string[];
    try {
      names = readdirSync(p);
    } catch (e) {
      if (gone(e)) return;
      throw e;
    }
    for (const n of names) {
      const q = path.join(p, n);
      try {
        if (statSync(q).isDirectory()) walk(q);
        else out.push({ file: path.relative(dir, q), bytes: readFileSync(q) });
      } catch (e) {
        if (!gone(e)) throw e;
      }
    }
  };
  walk(dir);
  return out;
}
