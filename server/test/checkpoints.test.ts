// Checkpoints of an upload (Sink.checkpoint, docs/store.md §6) against a real server on a
// loopback port: a committed upload that made checkpoints leaves nothing behind but its
// version; a connection cut after checkpoints suspends in place of the last one and resumes;
// a small edit of a large file makes none (a checkpoint saves a resume the literal bytes
// received, not the copies); and no checkpoint's segments are deleted while its upload goes on.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { pushBytes, testServer } from '../../harness/helpers.ts';
import { socketPipe } from '../../harness/pipe.ts';
import { until } from '../../harness/wait.ts';
import { fastRandomBytes } from '../../harness/testdata.ts';
import { unreferenced } from '../src/store/gc.ts';
import { uploadsKey } from '../src/store/keys.ts';
import { RESUME_CHECKPOINT_BYTES } from '../../shared/src/base/limits.ts';

test('a small edit of a file of several checkpoints makes none; a first upload of it makes one per RESUME_CHECKPOINT_BYTES', async () => {
  const s = await testServer({});
  const store = await s.storeOf('local');
  const key = uploadsKey('local', 'c.bin');
  let writes = 0;
  const putHead = store.backend.putHead.bind(store.backend);
  store.backend.putHead = (k, body, tag) => ((writes += k === key ? 1 : 0), putHead(k, body, tag));
  try {
    const a = fastRandomBytes(3, 3 * RESUME_CHECKPOINT_BYTES + (5 << 20));
    assert.equal((await pushBytes(s, 'c.bin', a)).version, 1);
    // three checkpoints listed, the last one unlisted before the commit
    assert.equal(writes, 4, 'uploads head writes of the first upload');
    writes = 0;
    const b = Buffer.from(a);
    b.set(fastRandomBytes(4, 2048), 20 << 20);
    const rep = await pushBytes(s, 'c.bin', b);
    assert.equal(rep.version, 2);
    assert.ok(rep.literalBytes < 64 << 10, `${rep.literalBytes} literal bytes`);
    assert.equal(writes, 0, 'uploads head writes of a 2 KB edit');
    assert.ok((await s.stored('c.bin')).equals(b));
  } finally {
    await s.stop();
  }
});

test('an upload checkpointed on its way commits with nothing left listed or unreferenced, and a cut one resumes from its suspend', async () => {
  const logs: Record<string, unknown>[] = [];
  // (the retry waits for the cut session's end before its Hello: no Hello deadline meanwhile)
  const s = await testServer({ 'hello-timeout-ms': '600000' }, (e) => void (e.op === 'push' && logs.push(e)));
  const store = await s.storeOf('local');
  const uploads = async (name: string) => JSON.parse(Buffer.from((await store.backend.getHead(uploadsKey('local', name)))?.body ?? '{"uploads":[]}').toString()).uploads as unknown[];
  // connection `cut.n`, once it has passed `cut.at` bytes, is held until the server lists the
  // upload's checkpoint, then cut; the retry (the next connection) is held until the server has
  // ended the cut session (its suspend listed): each step waits for the event, not for bytes
  const cut = { n: -1, at: 0, name: '' };
  const listed = (name: string) => until(`a checkpoint of ${name} listed`, async () => (await uploads(name)).length > 0).then(() => true);
  const ended = (name: string) => until(`the cut session of ${name} logged`, () => logs.some((e) => e.name === name && e.aborted));
  const pipe = await socketPipe({
    to: () => s.port,
    cut: (n, seen) => n === cut.n && seen > cut.at && listed(cut.name),
    hold: (n) => (cut.n >= 0 && n === cut.n + 1 ? ended(cut.name) : null),
  });
  try {
    // three checkpoints on the way (16, 32, 48 MiB), then the commit
    const a = fastRandomBytes(1, 3 * RESUME_CHECKPOINT_BYTES + (5 << 20));
    assert.equal((await pushBytes(pipe, 'a.bin', a)).version, 1);
    assert.deepEqual(await uploads('a.bin'), [], 'the last checkpoint is unlisted before the commit');
    assert.ok((await s.stored('a.bin')).equals(Buffer.from(a)));
    assert.deepEqual(await unreferenced(s.repo), [], 'nothing left behind');

    // cut after two checkpoints; the retry resumes from what the suspend listed
    const b = fastRandomBytes(2, 3 * RESUME_CHECKPOINT_BYTES);
    Object.assign(cut, { n: pipe.connections, at: 2.5 * RESUME_CHECKPOINT_BYTES, name: 'b.bin' });
    const rep = await pushBytes(pipe, 'b.bin', b, { retries: 3 });
    assert.equal(rep.version, 1);
    assert.ok((logs[logs.length - 1].resumedChunks as number) > 0, JSON.stringify(logs[logs.length - 1]));
    assert.ok((await s.stored('b.bin')).equals(Buffer.from(b)), 'stored exactly: no checkpoint dropped a segment the upload still used');
    assert.deepEqual(await uploads('b.bin'), []);
    assert.deepEqual(await unreferenced(s.repo), [], 'nothing left behind');
  } finally {
    pipe.close();
    await s.stop();
  }
});
