// SIGKILL of the server process: mid-Phase 3 of one upload, and at random points of many
// concurrent syncs. Afterwards every file reads back as exactly one of its committed versions,
// start-up removes partial uploads, and the next sync works.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { Repo } from '../src/store/repo.ts';
import { localBackend } from '../src/store/local.ts';
import { runGc, unreferenced } from '../src/store/gc.ts';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { Rng, applyEdits, fastRandomBytes } from '../../harness/testdata.ts';
import { startChild } from '../../harness/child.ts';
import { download, killTrials, versionsOf } from '../../harness/trials.ts';
import WebSocket from 'ws';
import { type Source, bufferSource } from '../../shared/src/chunking/chunk-index.ts';
import type { WebSocketCtor } from '../../shared/src/transport/conn.ts';
import { push } from '../../shared/src/session/delta-client.ts';
import { pushBytes } from '../../harness/helpers.ts';

test('SIGKILL mid-Phase 3 keeps the previous version and the next push works', async () => {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-crash-'));
  let s: Awaited<ReturnType<typeof startChild>> | undefined;
  try {
    const v1 = fastRandomBytes(1, 24 << 20);
    const v2 = applyEdits(v1, new Rng(3), { kind: 'inverse', total: 12 << 20, maxFragment: 64 << 10 });
    s = await startChild(data);
    await pushBytes(s, 'big.bin', v1);
    // The kill lands inside Phase 3 whatever the machine's speed: the source kills the server
    // when the client reads its 1st, 4th or 10th run of Delta Bytes (any read but the
    // chunking's 1 MiB slices), that is after a Verdict went out. The phases overlap, so this
    // may come before the whole Checksum List is out.
    const slice = 1 << 20;
    for (const killAt of [1, 4, 10]) {
      const child = s;
      let killedInPhase3 = false;
      let reads = 0;
      const bytes = bufferSource(v2);
      const source: Source = {
        size: bytes.size,
        read: async (offset, length, into) => {
          const chunking = offset % slice === 0 && length === Math.min(slice, bytes.size - offset);
          if (!chunking && ++reads === killAt) {
            killedInPhase3 = true;
            await child.kill();
          }
          return bytes.read(offset, length, into);
        },
      };
      const attempt = push(source, { url: s.wsUrl, name: 'big.bin', WebSocket: WebSocket as unknown as WebSocketCtor, sliceBytes: slice });
      await assert.rejects(attempt, /closed|connection|ECONNRESET|socket/i);
      assert.ok(killedInPhase3, 'the kill happened while Delta Bytes were being read');
      await child.kill();
      // A restart serves version 1 unchanged, and gc collects what the killed upload left.
      s = await startChild(data);
      assert.deepEqual(await versionsOf(s.url, 'big.bin'), [1]);
      const repo = new Repo(localBackend(data));
      await runGc(repo, { minAgeMs: 0, windowMs: 10, repackPercent: 20 });
      assert.deepEqual(await unreferenced(repo), []);
      assert.deepEqual(await download(s.url, 'big.bin'), Buffer.from(v1));
    }
    const rep = await pushBytes(s, 'big.bin', v2);
    assert.equal(rep.version, 2);
    assert.deepEqual(await download(s.url, 'big.bin', 2), Buffer.from(v2));
    assert.deepEqual(await download(s.url, 'big.bin', 1), Buffer.from(v1));
  } finally {
    await s?.kill(); // a failed assertion must not leave the server running (the test would hang)
    rmSync(data, { recursive: true, force: true });
  }
});

test('SIGKILL at random points of many concurrent syncs', async () => {
  const kills = await killTrials(Number(process.env.KILL_TRIALS ?? 8), 5);
  assert.ok(kills >= 8);
});
