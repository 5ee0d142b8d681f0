// A garbage collector in its own process, collecting over and over (so a SIGKILL lands at a
// random point of it): node --import tsx gc-child.ts DIR WINDOW_MS STALE_MS
// With REPACK_STOP_AT=written|pending|confirmed it says `at <step>` on stdout when a repack
// reaches that step and stops there (for a SIGKILL at that point).
import { Repo } from '../src/store/repo.ts';
import { runGc } from '../src/store/gc.ts';
import { localBackend } from '../src/store/local.ts';
import { repackHooks } from '../src/store/repack.ts';
import '../../shared/src/chunking/wasm.ts';

const [dir, windowMs, staleMs] = process.argv.slice(2);
const stopAt = process.env.REPACK_STOP_AT;
if (stopAt)
  repackHooks.step = async (step) => {
    if (step !== stopAt) return;
    process.stdout.write(`at ${step}\n`);
    await new Promise(() => {});
  };
const repo = new Repo(localBackend(dir));
for (;;) {
  const r = await runGc(repo, { minAgeMs: 0, windowMs: Number(windowMs), repackPercent: 20, staleMs: Number(staleMs) });
  process.stdout.write(JSON.stringify(r) + '\n');
}
