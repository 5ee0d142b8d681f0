// What a server answered is in the store (docs/store.md §1 "Local directory", §4 "Commits at
// once"): a child `dsync serve` over a local directory SIGKILLs itself the moment its answer to
// a bulk upload (one group commit of BULK_ENTRIES files: new names in new folders, and new
// versions of files it had) is handed to the system (DSYNC_TEST_DIE_AFTER_BULK); a server
// started again on the store then reads back every file the answer named, byte-exact at the
// version it named, and `dsync check --read-data` finds nothing wrong. A process killed keeps
// what it wrote in the system's cache, so this is a crash of the server, not a power cut (which
// no test here can make): what it shows is that nothing a group commit's answer names is
// written, linked or swapped after the answer.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import test from 'node:test';
import { bytesToHex as hex } from '@noble/hashes/utils';
import '../../shared/src/chunking/wasm.ts';
import { bufferSource, chunkSource } from '../../shared/src/chunking/chunk-index.ts';
import { BULK_ENTRIES } from '../../shared/src/base/limits.ts';
import { bulkFrame } from '../../shared/src/wire/bulk.ts';
import { DEFAULT_ALGO, DEFAULT_PARAMS } from '../../shared/src/wire/protocol.ts';
import { type Child, startServe } from '../../harness/child.ts';
import { randomBytes } from '../../harness/testdata.ts';
import { expectCheckClean } from '../../cli/test/run.ts';

interface Entry {
  name: string;
  expect: number;
  bytes: Uint8Array;
}

async function bulkBody(entries: Entry[]): Promise<Buffer> {
  const parts: Uint8Array[] = [];
  for (const e of entries) {
    const root = hex((await chunkSource(bufferSource(e.bytes), DEFAULT_PARAMS, DEFAULT_ALGO)).root);
    parts.push(...bulkFrame({ name: e.name, expect: e.expect, size: e.bytes.length, root }, e.bytes));
  }
  return Buffer.concat(parts);
}

async function bulk(url: string, entries: Entry[]): Promise<{ results: { name: string; version?: number; error?: string }[] }> {
  const res = await fetch(`${url}/api/files/bulk`, { method: 'POST', headers: { 'Content-Type': 'application/octet-stream' }, body: new Uint8Array(await bulkBody(entries)) });
  assert.equal(res.status, 200);
  return (await res.json()) as { results: { name: string; version?: number }[] };
}

const exited = (c: Child) => new Promise<void>((r) => (c.child.exitCode !== null || c.child.signalCode !== null ? r() : c.child.once('exit', () => r())));

test('a server killed right after answering a bulk upload has every file it answered, byte-exact', async () => {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-store-durable-'));
  let child: Child | undefined;
  try {
    // files the store has at version 1 (their heads and folders exist), written by a server
    // that stays up
    const had: Entry[] = Array.from({ length: 64 }, (_, i) => ({ name: `old/d${i % 4}/f${i}.bin`, expect: 0, bytes: randomBytes(100 + i, 1 + ((i * 7919) % 12_000)) }));
    child = await startServe(['--data', data, '--max-load', '0']);
    assert.ok((await bulk(child.url, had)).results.every((r) => r.version === 1));
    await child.kill();

    // one full group: new versions of those, and new names in new folders two deep
    const fresh = Array.from({ length: BULK_ENTRIES - had.length }, (_, i) => ({ name: `new/a${i % 8}/b${i % 3}/f${i}.txt`, expect: 0, bytes: randomBytes(500 + i, 1 + ((i * 104_729) % 16_000)) }));
    const entries: Entry[] = [...had.map((e, i) => ({ ...e, expect: 1, bytes: randomBytes(900 + i, 1 + ((i * 31) % 9_000)) })), ...fresh];
    child = await startServe(['--data', data, '--max-load', '0'], { env: { ...process.env, DSYNC_TEST_DIE_AFTER_BULK: '1' } });
    const dying = child;
    const answer = await bulk(dying.url, entries);
    await exited(dying);
    assert.equal(dying.child.signalCode, 'SIGKILL', 'the server died at the hook');
    assert.deepEqual(
      answer.results.map((r) => r.version),
      entries.map((e) => e.expect + 1),
      'the answer named every entry committed',
    );

    child = await startServe(['--data', data, '--max-load', '0']);
    for (const [k, e] of entries.entries()) {
      const version = answer.results[k].version!;
      const v: Response = await fetch(`${child.url}/api/versions?name=${encodeURIComponent(e.name)}`);
      assert.equal(v.status, 200, e.name);
      const versions = ((await v.json()) as { version: number }[]).map((x) => x.version);
      assert.equal(Math.max(...versions), version, e.name);
      const d: Response = await fetch(`${child.url}/api/download?name=${encodeURIComponent(e.name)}&version=${version}`);
      assert.equal(d.status, 200, e.name);
      assert.ok(Buffer.from(await d.arrayBuffer()).equals(Buffer.from(e.bytes)), `${e.name} version ${version} reads back byte-exact`);
    }
    await child.kill();
    child = undefined;
    await expectCheckClean(data);
  } finally {
    await child?.kill();
    rmSync(data, { recursive: true, force: true });
  }
});
