// A garbage collector in its own process, collecting over and over (so a SIGKILL lands at a
// random point of it): node --import tsx gc-child.ts DIR WINDOW_MS STALE_MS
import { Repo } from '../src/store/repo.ts';
import { runGc } from '../src/store/gc.ts';
import { localBackend } from '../src/store/local.ts';
import '../../shared/src/wasm.ts';

const [dir, windowMs, staleMs] = process.argv.slice(2);
const repo = new Repo(localBackend(dir));
for (;;) {
  const r = await runGc(repo, { minAgeMs: 0, windowMs: Number(windowMs), staleMs: Number(staleMs) });
  process.stdout.write(JSON.stringify(r) + '\n');
}
