// Issue 46's leak test (docs/vaults.md, "Leakage, measured"): a vault filled from the page and
// the CLI (several versions, a conflict between two synced devices, a delete), all of it
// through a proxy that keeps every byte the server receives; then every file of the server's
// data folder, every line it logged and every byte it received are searched for every 16-byte
// run of every version of every file, every file name, and every unkeyed BLAKE3 and SHA-256
// (raw and hex) of each version and of each chunk as plain Dsync cuts it: none is found. Every
// stored object of the vault has a padded or fixed size. Controls (the vault id, the keyfile,
// a pack's bytes, a file pushed to a plain folder: what the server does receive) show that the
// search finds what is there.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { blake3 } from '@noble/hashes/blake3';
import { sha256 } from '@noble/hashes/sha2';
import '../shared/src/chunking/wasm.ts';
import { bufferSource, chunkSource } from '../shared/src/chunking/chunk-index.ts';
import { DEFAULT_ALGO, DEFAULT_PARAMS } from '../shared/src/wire/protocol.ts';
import { PACK_BLOCK, SEAL_OVERHEAD, padme } from '../shared/src/vault/format.ts';
import { KEYFILE_BYTES } from '../shared/src/vault/keys.ts';
import { decodeVaultHead } from '../server/src/store/vault-format.ts';
import { pushBytes } from '../harness/helpers.ts';
import { recordingProxy } from '../harness/recording-proxy.ts';
import { storedFiles } from '../harness/stored-files.ts';
import { TestServer } from './server.ts';
import { createVault, expect, root, test } from './fixtures.ts';

const PASSPHRASE = 'correct horse battery staple';
const DEVICES = ['laptop-of-ann', 'desktop-of-bob'];


/** What of `needles` (16-byte latin1 strings → what each is) occurs in `hay`: one window at a
 *  time, each a Map lookup. */
function found16(needles: Map<string, string>, hay: Buffer): string[] {
  const s = hay.toString('latin1');
  const out = new Set<string>();
  for (let at = 0; at + 16 <= s.length; at++) {
    const what = needles.get(s.slice(at, at + 16));
    if (what) out.add(what);
  }
  return [...out];
}

test('a vault filled from the page and the CLI (versions, a conflict, a delete): no plaintext, name or unkeyed hash reaches the server; every stored object is padded', async ({ page, dir }) => {
  test.setTimeout(900_000);
  const server = await new TestServer([], { keepLog: true }).start();
  const proxy = await recordingProxy(server.url);
  try {
    /** every version of every file, by name */
    const versions = new Map<string, Buffer[]>();
    const keep = (name: string, bytes: Buffer) => (versions.set(name, [...(versions.get(name) ?? []), bytes]), bytes);
    const edit = (b: Buffer, at: number, n: number) => Buffer.concat([b.subarray(0, at), randomBytes(n), b.subarray(at)]);
    const latest = (name: string) => versions.get(name)!.at(-1)!;

    // the page creates the vault and adds five files
    await createVault(page, proxy.url, PASSPHRASE);
    const id = (await page.getByTestId('vault').getAttribute('data-id'))!;
    const sizes = { 'contract-draft-alpha.pdf': 900_000, 'beach-day-photo.jpg': 300_000, 'secret-diary-tuesday.txt': 30_000, 'budget-forecast.xlsx': 6_000, 'memo-to-delete.txt': 5_000 };
    mkdirSync(path.join(dir, 'page'));
    const picked = Object.entries(sizes).map(([name, size]) => {
      writeFileSync(path.join(dir, 'page', name), keep(name, randomBytes(size)));
      return path.join(dir, 'page', name);
    });
    await page.getByTestId('vault-file-input').setInputFiles(picked);
    const row = (name: string) => page.locator(`[data-testid=vault-file][data-name="${name}"]`);
    for (const name of Object.keys(sizes)) await expect(row(name)).toBeVisible({ timeout: 120_000 });

    // the CLI pushes new versions (the diary three, the contract two) and a file in a folder
    const run = async (home: string, ...args: string[]) => {
      const env = { ...process.env, DSYNC_SERVER: proxy.url, DSYNC_VAULT_PASSPHRASE: PASSPHRASE, XDG_CONFIG_HOME: path.join(dir, home, 'config'), DSYNC_CACHE_DIR: path.join(dir, home, 'cache') };
      return (await promisify(execFile)(process.execPath, [path.join(root, 'bin/dsync.mjs'), ...args], { env, maxBuffer: 16 << 20 })).stdout;
    };
    const push = async (name: string, bytes: Buffer) => {
      const file = path.join(dir, 'cli', path.basename(name));
      mkdirSync(path.dirname(file), { recursive: true });
      writeFileSync(file, keep(name, bytes));
      await run('cli', 'push', file, '--vault', id, '--name', name);
    };
    await push('secret-diary-tuesday.txt', edit(latest('secret-diary-tuesday.txt'), 10_000, 2_000));
    await push('secret-diary-tuesday.txt', edit(latest('secret-diary-tuesday.txt'), 25_000, 3_000));
    await push('contract-draft-alpha.pdf', edit(latest('contract-draft-alpha.pdf'), 400_000, 2_000));
    await push('legal/settlement-terms-final.doc', randomBytes(200_000));
    await push('legal/settlement-terms-final.doc', edit(latest('legal/settlement-terms-final.doc'), 150_000, 1_000));

    // two devices sync the vault; both edit the budget between syncs: the second makes a conflict copy
    const folder = (device: string) => path.join(dir, device, 'folder');
    const sync = async (device: string) => {
      mkdirSync(folder(device), { recursive: true });
      const lines = (await run(device, 'sync', folder(device), '--vault', id, '--device', device, '--json')).split('\n').filter(Boolean).map((l) => JSON.parse(l));
      expect(lines.at(-1).pass.agreed).toBe(true);
      return lines.filter((l) => l.op);
    };
    for (const device of DEVICES) await sync(device);
    expect(readFileSync(path.join(folder(DEVICES[1]), 'secret-diary-tuesday.txt')).equals(latest('secret-diary-tuesday.txt'))).toBe(true);
    expect(readFileSync(path.join(folder(DEVICES[1]), 'legal/settlement-terms-final.doc')).equals(latest('legal/settlement-terms-final.doc'))).toBe(true);
    const budget = latest('budget-forecast.xlsx');
    for (const device of DEVICES) writeFileSync(path.join(folder(device), 'budget-forecast.xlsx'), keep('budget-forecast.xlsx', edit(budget, 3_000, 500)));
    await sync(DEVICES[0]);
    const conflictCopy: string = (await sync(DEVICES[1])).find((d) => d.op === 'conflict')?.conflictCopy;
    expect(conflictCopy).toMatch(/^budget-forecast \(conflict from desktop-of-bob .*\)\.xlsx$/);
    keep(conflictCopy, latest('budget-forecast.xlsx'));
    await sync(DEVICES[0]);

    // the page deletes a file, and lists the conflict copy and the CLI's file
    await page.getByRole('button', { name: 'Refresh' }).click();
    await expect(row(conflictCopy)).toBeVisible({ timeout: 60_000 });
    await expect(row('legal/settlement-terms-final.doc')).toBeVisible();
    await page.getByRole('button', { name: 'History of memo-to-delete.txt' }).click();
    await page.getByRole('button', { name: 'Delete memo-to-delete.txt' }).click({ timeout: 60_000 });
    await page.getByTestId('dialog').getByRole('button', { name: 'Delete', exact: true }).click();
    await expect(row('memo-to-delete.txt')).toHaveCount(0, { timeout: 60_000 });
    await expect(page.getByTestId('vault-error')).toHaveCount(0);

    // a control: a file pushed to a plain folder through the proxy, which the search must find
    const plain = randomBytes(50_000);
    await pushBytes({ wsUrl: proxy.url.replace('http', 'ws') + '/sync' }, 'plain-control-file.bin', plain);
    // its log line, once here, follows every line logged before it
    await expect.poll(() => Buffer.concat(server.output).includes('plain-control-file.bin'), { timeout: 60_000 }).toBe(true);

    // the needles: every 16-byte run of every version; the unkeyed hashes of each version and
    // of each of its chunks (plain Dsync's chunking), raw and in lowercase hex, by their first
    // 16 bytes (a whole hash holds them); the names, searched whole
    const needles = new Map<string, string>();
    const hashNeedle = (h: Uint8Array, what: string) => {
      needles.set(Buffer.from(h.subarray(0, 16)).toString('latin1'), what);
      needles.set(Buffer.from(h).toString('hex').slice(0, 16), `${what} (hex)`);
    };
    let chunks = 0;
    for (const [name, list] of versions) {
      for (const [v, bytes] of list.entries()) {
        const what = `${name} #${v + 1}`;
        const s = bytes.toString('latin1');
        for (let at = 0; at + 16 <= s.length; at++) needles.set(s.slice(at, at + 16), `16 bytes of ${what}`);
        hashNeedle(blake3(bytes), `BLAKE3 of ${what}`);
        hashNeedle(sha256(bytes), `SHA-256 of ${what}`);
        const index = await chunkSource(bufferSource(bytes), DEFAULT_PARAMS, DEFAULT_ALGO);
        hashNeedle(index.root, `the Dsync root of ${what}`);
        let at = 0;
        for (const [i, n] of index.lengths.entries()) {
          hashNeedle(blake3(bytes.subarray(at, at + n)), `BLAKE3 of chunk ${i} of ${what}`);
          hashNeedle(sha256(bytes.subarray(at, at + n)), `SHA-256 of chunk ${i} of ${what}`);
          at += n;
          chunks++;
        }
      }
    }
    const names = [...versions.keys(), ...DEVICES].flatMap((n) => [n, path.basename(n), encodeURIComponent(n)]);

    // the haystacks: the data folder (each file's path and bytes), the log, what was received
    const stored = storedFiles(server.data);
    const received = await proxy.received();
    const haystacks: [string, Buffer][] = [
      ...stored.map((f): [string, Buffer] => [`stored ${f.file}`, Buffer.concat([Buffer.from(f.file), Buffer.from('\n'), f.bytes])]),
      ['the log', Buffer.concat(server.output)],
      ...received.map((b, i): [string, Buffer] => [`received on connection ${i}`, b]),
    ];
    const leaks = haystacks.flatMap(([where, hay]) => [...found16(needles, hay), ...names.filter((n) => hay.includes(n))].map((what) => `${where}: ${what}`));
    expect(leaks).toEqual([]);
    test.info().annotations.push({
      type: 'searched',
      description: `${needles.size} needles (${chunks} chunks of ${[...versions.values()].flat().length} versions of ${versions.size} files), ${names.length} names; ${stored.length} stored files, ${server.output.length} log writes, ${received.length} received streams (${received.reduce((n, b) => n + b.length, 0)} bytes)`,
    });

    // controls: what the server does receive and store is found by the same search (the plain
    // file's bytes on the wire in a WebSocket's deflated frames)
    const vaultFiles = stored.filter((f) => f.file.split(path.sep).includes('vaults'));
    const kind = (f: { file: string }) => f.file.split(path.sep).find((p) => ['keys', 'heads', 'packs', 'sums'].includes(p)) ?? 'other';
    const packs = vaultFiles.filter((f) => kind(f) === 'packs');
    const keyfile = vaultFiles.find((f) => kind(f) === 'keys')!.bytes;
    const biggest = packs.reduce((a, b) => (b.bytes.length > a.bytes.length ? b : a)).bytes;
    const controls = new Map([
      [id.slice(0, 16), 'the vault id'],
      [keyfile.toString('latin1', 40, 56), 'the keyfile'],
      [keyfile.toString('base64').slice(0, 16), 'the keyfile (base64, as sent)'],
      [biggest.toString('latin1', biggest.length >> 1, (biggest.length >> 1) + 16), 'a pack'],
      [plain.toString('latin1', 30_000, 30_016), 'the plain file'],
      ['plain-control-fi', 'the plain name'],
    ]);
    const all = (hays: Buffer[]) => [...new Set(hays.flatMap((h) => found16(controls, h)))].sort();
    expect(all(received)).toEqual(['a pack', 'the keyfile (base64, as sent)', 'the plain file', 'the plain name', 'the vault id']);
    expect(all(stored.map((f) => Buffer.concat([Buffer.from(f.file), f.bytes])))).toEqual(['a pack', 'the keyfile', 'the plain file', 'the plain name', 'the vault id']);
    expect(all([Buffer.concat(server.output)])).toEqual(['the plain name', 'the vault id']);

    // sizes: every pack a PADME size (its sums follow from it); the keyfile fixed; each head's
    // sealed record a PADME size; no other kind of vault object
    expect([...new Set(vaultFiles.map(kind))].sort()).toEqual(['heads', 'keys', 'packs', 'sums']);
    expect(packs.length).toBeGreaterThan(1);
    expect(packs.filter((f) => padme(f.bytes.length) !== f.bytes.length).map((f) => `${f.file}: ${f.bytes.length}`)).toEqual([]);
    const packSize = new Map(packs.map((f) => [path.basename(f.file), f.bytes.length]));
    for (const f of vaultFiles.filter((x) => kind(x) === 'sums')) expect(f.bytes.length).toBe(45 + 32 * Math.ceil(packSize.get(path.basename(f.file))! / PACK_BLOCK));
    expect(vaultFiles.filter((f) => kind(f) === 'keys').map((f) => f.bytes.length)).toEqual([KEYFILE_BYTES]);
    const heads = vaultFiles.filter((f) => kind(f) === 'heads' && /^\d+$/.test(path.basename(f.file)));
    expect(heads.length).toBeGreaterThan(0);
    for (const f of heads) {
      const record = decodeVaultHead(f.bytes, f.file).body.length - 1 - SEAL_OVERHEAD;
      expect(padme(record), f.file).toBe(record);
    }
    test.info().annotations.push({ type: 'vault objects', description: `${packs.length} packs (${[...packSize.values()].join(', ')} bytes), ${heads.length} heads, 1 keyfile of ${KEYFILE_BYTES} bytes` });
  } finally {
    await proxy.close();
    await server.stop();
  }
});
