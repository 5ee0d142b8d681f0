// A server process of its own (harness; started by own-server.ts: its data directory on a
// small tmpfs, its memory measured). Flags as `dsync serve` takes them (`--key value`, or `--key` alone for
// true). It prints {"url": …} once listening, then one JSON line per log event with its time
// (`t`, ms since the epoch).
import { loadConfig } from '../server/src/config.ts';
import { startServer } from '../server/src/server.ts';

const flags: Record<string, string | boolean> = {};
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const key = argv[i].replace(/^--/, '');
  flags[key] = i + 1 < argv.length && !argv[i + 1].startsWith('--') ? argv[++i] : true;
}
const s = await startServer(loadConfig(flags, {}), (e) => console.log(JSON.stringify({ t: Date.now(), ...e })));
console.log(JSON.stringify({ url: s.url }));
