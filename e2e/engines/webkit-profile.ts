// WebKitGTK in a persistent profile with Safari's storage features on (webkit-profile.py, run
// under xvfb-run), as a PageDriver: the route to what Safari sees of OPFS, which the WebDriver
// route (drivers.ts: ephemeral automation sessions) cannot give. Needs /usr/bin/python3 with
// python3-gi and gir1.2-webkit2-4.1 (scripts/setup.sh installs them); `webkitProfileMissing`
// says what is missing.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import path from 'node:path';
import { createInterface } from 'node:readline';
import type { PageDriver } from './drivers.ts';

const PYTHON = '/usr/bin/python3';
const SCRIPT = path.join(path.dirname(new URL(import.meta.url).pathname), 'webkit-profile.py');

/** What this machine lacks to run the driver (null: nothing). */
export function webkitProfileMissing(): string | null {
  try {
    execFileSync(PYTHON, ['-c', "import gi; gi.require_version('WebKit2', '4.1'); from gi.repository import WebKit2"], { stdio: 'ignore' });
  } catch {
    return `${PYTHON} with python3-gi and gir1.2-webkit2-4.1 (scripts/setup.sh test installs them)`;
  }
  try {
    execFileSync('sh', ['-c', 'command -v xvfb-run'], { stdio: 'ignore' });
  } catch {
    return 'xvfb-run (Debian xvfb)';
  }
  return null;
}

export interface ProfilePage extends PageDriver {
  /** WebKitGTK's version */
  version: string;
  /** the features turned on */
  features: string[];
}

/** Starts WebKitGTK on the persistent profile folder `profile` (made if missing). */
export async function launchWebKitProfile(profile: string): Promise<ProfilePage> {
  const child: ChildProcess = spawn('xvfb-run', ['-a', PYTHON, SCRIPT, profile], { stdio: ['pipe', 'pipe', 'inherit'], detached: true });
  const lines = createInterface({ input: child.stdout! });
  const waiting = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  let ready: (v: { ready: string; features: string[] }) => void;
  let failed: (e: Error) => void;
  const started = new Promise<{ ready: string; features: string[] }>((res, rej) => ((ready = res), (failed = rej)));
  lines.on('line', (line) => {
    const m = JSON.parse(line);
    if ('ready' in m) return ready(m);
    const w = waiting.get(m.id);
    waiting.delete(m.id);
    if (!w) return;
    if ('error' in m) w.reject(new Error(m.error));
    else w.resolve(m.ok);
  });
  child.on('exit', (code) => {
    const e = new Error(`webkit-profile.py ended (exit ${code})`);
    failed(e);
    for (const w of waiting.values()) w.reject(e);
    waiting.clear();
  });
  let next = 1;
  const send = (c: Record<string, unknown>) =>
    new Promise<unknown>((resolve, reject) => {
      const id = next++;
      waiting.set(id, { resolve, reject });
      child.stdin!.write(JSON.stringify({ id, ...c }) + '\n');
    });
  const { ready: version, features } = await started;
  let url = '';
  const page: ProfilePage = {
    version,
    features,
    goto: async (u) => {
      url = u;
      await send({ load: u });
    },
    reload: async () => void (await send({ load: url })),
    setInputFiles: async (selector, files) => {
      await send({ files });
      await send({ eval: '(s) => document.querySelector(s).click()', arg: selector });
    },
    click: async (selector) => void (await send({ eval: '(s) => { const e = document.querySelector(s); e.scrollIntoView(); e.click(); }', arg: selector })),
    evaluate: <A, R>(fn: (arg: A) => R | Promise<R>, arg?: A) => send({ eval: fn.toString(), arg: arg ?? null }) as Promise<R>,
    setViewport: async () => {
      throw new Error('webkit-profile: no viewport control');
    },
    close: async () => {
      await send({ quit: true }).catch(() => {});
      if (child.exitCode === null) {
        const gone = new Promise((r) => child.once('exit', r));
        setTimeout(() => child.exitCode === null && process.kill(-child.pid!, 'SIGTERM'), 10_000).unref();
        await gone;
      }
    },
  };
  return page;
}
