// docker-compose.yml cannot run here (no Docker engine), so check its structure and run what it
// runs: the service's command (data volume mapped to a temp dir) and its health check.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import YAML from 'yaml';

const root = new URL('../..', import.meta.url).pathname;

test('docker-compose.yml: one server service with a data volume, and its command and health check work', async () => {
  const compose = YAML.parse(readFileSync(path.join(root, 'docker-compose.yml'), 'utf8'));
  const svc = compose.services.dsync;
  assert.equal(svc.build, '.');
  assert.deepEqual(svc.ports, ['8080:8080']);
  const [volume, mount] = svc.volumes[0].split(':');
  assert.ok(compose.volumes[volume] !== undefined, 'named volume declared');
  const cmd: string[] = svc.command;
  assert.equal(cmd[cmd.indexOf('--data') + 1], mount, 'the server writes to the mounted volume');
  assert.equal(cmd[cmd.indexOf('--host') + 1], '0.0.0.0', 'in the container the server listens beyond loopback (its default), so the published port reaches it');

  // The Dockerfile's CMD is the same command, its COPY sources exist, and the pinned
  // wasm-bindgen CLI matches wasm/Cargo.lock.
  const dockerfile = readFileSync(path.join(root, 'Dockerfile'), 'utf8');
  assert.ok(dockerfile.includes(`CMD ${JSON.stringify(cmd).replace(/,/g, ', ')}`), 'Dockerfile CMD equals the compose command');
  for (const m of dockerfile.matchAll(/^COPY (?!--from)(.+) \S+$/gm)) {
    for (const src of m[1].split(' ')) assert.ok(existsSync(path.join(root, src)), `COPY source ${src}`);
  }
  const lock = readFileSync(path.join(root, 'wasm/Cargo.lock'), 'utf8');
  const wb = /name = "wasm-bindgen"\nversion = "([^"]+)"/.exec(lock)![1];
  assert.ok(dockerfile.includes(`wasm-bindgen-cli --version ${wb}`), `Dockerfile pins wasm-bindgen-cli ${wb}`);

  // Run the service's command with the volume mapped to a temp dir and a free port.
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-compose-'));
  const args = cmd.slice(1).map((a) => (a === mount ? data : a === '8080' ? '0' : a));
  const child = spawn(process.execPath, [...args.map((a) => (a.endsWith('.mjs') ? path.join(root, a) : a)), '--host', '127.0.0.1'], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, ...svc.environment },
  });
  try {
    const url = await new Promise<string>((resolve, reject) => {
      let out = '';
      child.stdout!.on('data', (d) => {
        out += d;
        const m = /on (http:\/\/[\d.]+:\d+)/.exec(out);
        if (m) resolve(m[1]);
      });
      child.once('exit', (c) => reject(new Error(`exited ${c}: ${out}`)));
    });
    const check: string[] = svc.healthcheck.test;
    assert.equal(check[0], 'CMD');
    const script = check[3].replace('http://127.0.0.1:8080', url);
    const r = spawnSync(check[1], [check[2], script], { encoding: 'utf8' });
    assert.equal(r.status, 0, 'health check passes');
    assert.ok(existsSync(path.join(data, 'ns/local/files')), 'the store lives in the volume');
  } finally {
    child.kill('SIGKILL');
    rmSync(data, { recursive: true, force: true });
  }
});
