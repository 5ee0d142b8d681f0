// docker-compose.yml and the Dockerfile cannot run here (no Docker engine), so check their
// structure, run what they run where that needs no Docker (the image's command and health
// check; HAProxy's own check of deploy/haproxy.cfg), and leave the three programs together to
// scaleout.test.ts.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import YAML from 'yaml';
import { pushBytes } from '../../harness/helpers.ts';

const root = new URL('../..', import.meta.url).pathname;
const read = (f: string) => readFileSync(path.join(root, f), 'utf8');
const compose = YAML.parse(read('docker-compose.yml'));
const dockerfile = read('Dockerfile');
const flag = (cmd: string[], name: string) => cmd[cmd.indexOf(name) + 1];

test('docker-compose.yml: MinIO, two Dsync servers on one bucket, HAProxy in front', () => {
  const { minio, dsync1, dsync2, haproxy } = compose.services;
  assert.deepEqual(Object.keys(compose.services).sort(), ['dsync1', 'dsync2', 'haproxy', 'minio']);

  // MinIO: built from the Dockerfile's "minio" stage, at the version the tests use.
  assert.equal(minio.build.target, 'minio');
  assert.match(dockerfile, /^FROM \S+ AS minio$/m);
  const pin = /go install (github\.com\/minio\/minio@\S+)/.exec(dockerfile)![1];
  assert.ok(read('scripts/setup.sh').includes(`MINIO_MOD=${pin}`), `setup.sh installs the same ${pin}`);
  const minioPort = flag(minio.command, '--address').split(':')[1];
  const [volume] = minio.volumes[0].split(':');
  assert.ok(compose.volumes[volume] !== undefined, 'MinIO keeps its data on a named volume');
  assert.ok(minio.healthcheck.test.join(' ').includes(`127.0.0.1:${minioPort}/minio/health/live`));

  // Two servers with one command: the same bucket, through the MinIO service, with its credentials.
  assert.deepEqual(dsync1, dsync2);
  const cmd: string[] = dsync1.command;
  assert.deepEqual(cmd.slice(0, 3), ['node', 'bin/dsync.mjs', 'serve']);
  assert.match(flag(cmd, '--store'), /^s3:\/\/[a-z0-9.-]+$/);
  assert.equal(flag(cmd, '--s3-endpoint'), `http://minio:${minioPort}`);
  assert.equal(dsync1.environment.AWS_ACCESS_KEY_ID, minio.environment.MINIO_ROOT_USER);
  assert.equal(dsync1.environment.AWS_SECRET_ACCESS_KEY, minio.environment.MINIO_ROOT_PASSWORD);
  assert.match(minio.environment.MINIO_ROOT_PASSWORD, /:\?/, 'no default password: compose refuses to start without one');
  assert.equal(dsync1.depends_on.minio.condition, 'service_healthy');
  assert.equal(dsync1.ports, undefined, 'the servers are reached through HAProxy only');
  const port = flag(cmd, '--port');
  assert.equal(flag(cmd, '--host'), '0.0.0.0', 'in a container the server listens beyond loopback (its default), so HAProxy reaches it');

  // HAProxy: publishes :8080 on this machine only (the servers have no accounts), and its
  // configuration names both servers, with health checks.
  assert.deepEqual(haproxy.ports, ['${DSYNC_PUBLISH:-127.0.0.1:8080}:8080']);
  assert.equal(cmd.includes('--users'), false, 'without accounts, so published on loopback only');
  const [cfgFile, cfgMount] = haproxy.volumes[0].split(':');
  assert.equal(cfgMount, '/usr/local/etc/haproxy/haproxy.cfg');
  const cfg = read(cfgFile);
  assert.match(cfg, /^\s*bind :8080$/m);
  assert.match(cfg, /^\s*option httpchk GET \/api\/health$/m);
  assert.match(cfg, /^\s*default-server check /m);
  assert.deepEqual([...cfg.matchAll(/^\s*server (\S+) (\S+)$/gm)].map((m) => [m[1], m[2]]), [
    ['dsync1', `dsync1:${port}`],
    ['dsync2', `dsync2:${port}`],
  ]);
  assert.deepEqual(Object.keys(haproxy.depends_on).sort(), ['dsync1', 'dsync2']);

  // HAProxy (Debian's, installed by setup.sh test) accepts the configuration.
  const check = spawnSync('haproxy', ['-c', '-f', path.join(root, cfgFile)], { encoding: 'utf8' });
  assert.equal(check.status, 0, check.stderr + check.stdout);
});

test('Dockerfile: its COPY sources exist, wasm-bindgen is pinned as in Cargo.lock, and its command and the compose health check work', async () => {
  for (const m of dockerfile.matchAll(/^COPY (?!--from)(.+) \S+$/gm)) {
    for (const src of m[1].split(' ')) assert.ok(existsSync(path.join(root, src)), `COPY source ${src}`);
  }
  const lock = read('wasm/Cargo.lock');
  const wb = /name = "wasm-bindgen"\nversion = "([^"]+)"/.exec(lock)![1];
  assert.ok(dockerfile.includes(`wasm-bindgen-cli --version ${wb}`), `Dockerfile pins wasm-bindgen-cli ${wb}`);

  // The image's CMD (one server on its /data volume), with the volume mapped to a temp dir and a
  // free port, answers the compose services' health check.
  const cmd: string[] = JSON.parse(/^CMD (\[.*\])$/m.exec(dockerfile)![1]);
  assert.match(dockerfile, /^VOLUME \/data$/m);
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-compose-'));
  const args = cmd.slice(1).map((a) => (a === '/data' ? data : a === '8080' ? '0' : a));
  const child = spawn(process.execPath, [...args.map((a) => (a.endsWith('.mjs') ? path.join(root, a) : a)), '--host', '127.0.0.1'], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'inherit'],
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
    const check: string[] = compose.services.dsync1.healthcheck.test;
    assert.equal(check[0], 'CMD');
    const script = check[3].replace('http://127.0.0.1:8080', url);
    const r = spawnSync(check[1], [check[2], script], { encoding: 'utf8' });
    assert.equal(r.status, 0, 'health check passes');
    await pushBytes({ wsUrl: url.replace('http', 'ws') + '/sync' }, 'compose.bin', new Uint8Array(1000).fill(7));
    assert.ok(readdirSync(data).length > 0, 'the store lives in the volume');
  } finally {
    child.kill('SIGKILL');
    rmSync(data, { recursive: true, force: true });
  }
});
