/**
 * Turns bench/results/eval/results.json into summary.md and the SVG figures (paper Fig. 11,
 * 14, 15, 17 and Table III). Runs at the end of every benchmark; by hand:
 *   node --import tsx bench/eval/report.ts [DIR]
 */
import { median } from '../lib/common.ts';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Report } from '../approaches/approach.ts';
import { APPROACHES } from '../approaches/index.ts';
import type { PairResult, RsyncRun } from './results.ts';
import { type BarGroup, linePanels, stackedBars } from './svg.ts';

const DEFAULT_OUT = fileURLToPath(new URL('../results/eval/', import.meta.url));
const KINDS = ['cut', 'insert', 'inverse'];

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Doc = any;

const mean = (xs: number[]) => xs.reduce((s, x) => s + x, 0) / xs.length;
const sizeLabel = (n: number) => (n >= 1 << 20 ? `${n / (1 << 20)} MB` : n >= 1024 ? `${n / 1024} KB` : `${n} B`);
/** A run left out (`--approaches`, `--no-rsync`) shows as a dash. */
const shown = (f: (n: number) => string) => (n: number) => (Number.isFinite(n) ? f(n) : '—');
const bytes = shown((n) => (n >= 1e9 ? `${(n / 1e9).toFixed(2)} GB` : n >= 1e6 ? `${(n / 1e6).toFixed(2)} MB` : n >= 1e3 ? `${(n / 1e3).toFixed(1)} KB` : `${n} B`));
const secs = shown((ms) => (ms >= 10000 ? `${(ms / 1000).toFixed(1)} s` : ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${Math.round(ms)} ms`));
const x = shown((r) => `${r.toFixed(2)}×`);
const whole = shown((v) => String(Math.round(v)));

/** Median of a field over a pair's repetitions. */
const med = (runs: Report[] | undefined, f: (r: Report) => number) => (runs?.length ? median(runs.map(f)) : NaN);
const T = (p: PairResult, a: string) => med(p.runs[a], (r) => r.timeMs.total);
const rsyncT = (p: PairResult) => (p.rsync?.length ? median(p.rsync.map((r: RsyncRun) => r.timeMs)) : NaN);
const rsyncB = (p: PairResult) => (p.rsync?.length ? p.rsync[0].sent + p.rsync[0].received : NaN);
const rsyncZ = (p: PairResult) => p.floors?.rsyncZ ?? NaN;
const zstdP = (p: PairResult) => p.floors?.zstdPatch ?? NaN;
const W = (p: PairResult, a: string) => med(p.runs[a], (r) => r.traffic.wire);
/** The floors' cells of a traffic table row: rsync -z and zstd --patch-from. */
const floorCells = (p: PairResult) => `${bytes(rsyncZ(p))} | ${bytes(zstdP(p))}`;

export function writeReport(doc: Doc, OUT = DEFAULT_OUT): void {
  const res: PairResult[] = doc.results;
  const syn = res.filter((r) => r.section === 'synthetic');
  const real = res.filter((r) => r.section === 'real');
  const large = res.filter((r) => r.section === 'large');
  const m = doc.machine;
  const machine = `${m.cpu}, ${m.cores} cores, ${m.memGiB} GiB, Node ${m.node}; ${m.pinning}; load average at start ${m.loadavgAtStart.join(' / ')}`;
  const footer = (shaping: string) => [`machine: ${machine}`, `shaping: ${shaping}; median of ${doc.reps} runs`, `command: ${doc.command}  (${doc.date})`];
  const md: string[] = [];
  md.push(`# Evaluation: Dsync and the baselines, side by side (paper §V)`, '');
  md.push(`- **Command:** \`${doc.command}\` (${doc.date}, ${doc.elapsedS} s)`);
  md.push(`- **Machine:** ${machine}. ${m.note}.`);
  md.push(`- **Shaping:** ${doc.shaping.default} for the 10 MB benchmark and the real datasets; ${doc.shaping.large} for the large files.`);
  const connects = res.flatMap((p) => Object.values(p.runs).flatMap((rs) => rs.map((r) => r.connectMs))).filter((c) => c > 0);
  md.push(
    doc.warm
      ? `- **Connection:** every timed sync runs on a WebSocket opened just before it, outside the timed span, as a web page holds its socket open (the paper's browser clients do; Dsync's page runs its syncs on one socket, docs/protocol.md §3). Opening one costs every approach the same two round trips (TCP, then the upgrade): median ${secs(median(connects))} here, not included in any time below.`
      : `- **Connection:** cold: every timed sync opens its WebSocket, and the opening (TCP + upgrade, two round trips, the same for every approach) is part of its time.`,
  );
  md.push(`- **Transport:** one WebSocket per sync (\`ws\`), permessage-deflate on for every approach on the 100 Mbps link, for the messages that carry the file's bytes (Dsync's Delta, the baselines' literal blocks and data; lists, tokens and control messages go uncompressed: they hold hashes, or are small), and off for the large files at 1 Gbps, where it would cap every approach at its ~45 MB/s; traffic is counted before compression (the paper's metric), *wire* is what the socket carried.`);
  md.push(`- **Repetitions:** ${doc.reps} per point; medians reported (rsync: ${doc.reps} on the 10 MB and real pairs, 1 on the large files).${doc.warmup ? ` Before them, ${doc.warmup} untimed sync${doc.warmup > 1 ? 's' : ''} of the same pair per approach (V8 runs a wasm function's first call in its baseline tier to the end: the baselines' rolling search is one call per sync); before every sync, dirty pages are written out (sync) and the files involved read into the page cache (this VM drops cached pages continuously, and a cold 1 GiB read costs ~1.9 s of CPU) — bench/eval/run.ts.` : ''}`);
  md.push(`- **Approaches:** \`dsync\` (product server, defaults: BLAKE3, cached chunk index; protocol version 5, the three phases, as a client that does not hold the basis' chunk index runs them: where no Match Token covers the target, the server lists the basis bytes facing it in 64 / 256 / 1024-byte chunks — Basis Checksums — and the client sends its chunks there as copies of those bytes plus literal pieces, docs/protocol.md §3; its store writes only the Delta Bytes and refers to the basis for the rest, §8), \`dsync-known\` (the same server and client library, the client re-pushing a file it pushed itself — the basis, put back by this client after every run — as the product client does: with at most 768 KiB of the file not found in the version it knows, it sends its own Match Tokens, the Checksum List and the Delta Bytes in one round trip, docs/protocol.md §3 "A known basis"; otherwise the three phases, as \`dsync\`; not run on the 1 GiB file, above the 64 MiB it applies to), \`dsync-kept\` (as \`dsync-known\`, the client keeping the bytes of the version it pushed, as the CLI does: the chunks it sends are refined against them byte by byte, shared/src/session/kept.ts; checking and keeping them after the Result counts in its client CPU time), \`dsync-paper\` (\`--paper-exact\`: basis re-chunked every sync, SHA-1, no refinement), \`webr2sync+\` (fixed 8 KB blocks, Adler-32 + SipHash, server-side byte-by-byte rolling search in wasm), \`dedup\` (FastCDC + BLAKE3 on every chunk on both sides, server re-chunks the basis every sync), \`full\` (whole file) — the baselines' server rebuilds and rewrites the whole file, as the papers' servers do —, and \`rsync\` 3.x binary over an rsync daemon through the same shaped link (no \`-z\`; bytes = "Total bytes sent + received"; native C, and unlike every WebSocket server here it does not fsync the file it writes; its times include its own connection and handshake, which it cannot keep open between syncs).`);
  md.push(`- **Where the time goes:** [profile.md](profile.md) (CPU profiles of the servers).`);
  md.push(`- **Times:** *total* = wall time from the client's first computation (chunking / hashing the target) to the server's verified Result${doc.warm ? ' (the socket already open)' : ' (the socket opened in between)'}; *client* = the client process' CPU time over that span; *server* = the server's time working on the session (wall time minus time waiting for the client's messages, as Dsync's server reports it in Result; the baselines' server measures it the same way; disk writes and fsync included); *network* = total − client − server, floored at 0 (on the large files client and server work overlap in a pipeline, so the parts can add up to more than the total).`);
  md.push('');

  if (syn.length) {
    const sizes = [...new Set(syn.map((p) => p.modSize!))].sort((a, b) => a - b);
    const kinds = KINDS.filter((k) => syn.some((p) => p.kind === k));
    const pair = (k: string, s: number) => syn.find((p) => p.kind === k && p.modSize === s);
    // Fig. 15
    md.push(`## Fig. 15 analogue: sync time vs modification size (10 MB mixed file, ${doc.shaping.default})`, '');
    md.push(`![Fig. 15](fig15-sync-time.svg)`, '');
    md.push(`| edit | size | ${APPROACHES.join(' | ')} | rsync | webr2sync+ / dsync | webr2sync+ / dsync-known | dedup / dsync |`, `|---|---:|${APPROACHES.map(() => '---:').join('|')}|---:|---:|---:|---:|`);
    for (const k of kinds)
      for (const s of sizes) {
        const p = pair(k, s);
        if (!p) continue;
        md.push(`| ${k} | ${sizeLabel(s)} | ${APPROACHES.map((a) => secs(T(p, a))).join(' | ')} | ${secs(rsyncT(p))} | ${x(T(p, 'webr2sync+') / T(p, 'dsync'))} | ${x(T(p, 'webr2sync+') / T(p, 'dsync-known'))} | ${x(T(p, 'dedup') / T(p, 'dsync'))} |`);
      }
    md.push('');
    writeFileSync(
      join(OUT, 'fig15-sync-time.svg'),
      linePanels({
        title: 'Fig. 15 analogue: sync time of a 10 MB mixed file vs modification size',
        xLabels: sizes.map(sizeLabel),
        xTitle: 'modification size',
        yTitle: 'sync time (ms, median)',
        panels: kinds.map((k) => ({ title: k, series: [...APPROACHES.map((a) => ({ name: a, values: sizes.map((s) => (pair(k, s) ? T(pair(k, s)!, a) : null)) })), { name: 'rsync', dash: true, values: sizes.map((s) => (pair(k, s) ? rsyncT(pair(k, s)!) : null)) }] })),
        footer: footer(doc.shaping.default),
      }),
    );
    // Fig. 14
    md.push(`## Fig. 14 analogue: time breakdown (client / server / network), mean over cut, insert and inverse of the per-edit medians`, '');
    md.push(`![Fig. 14](fig14-breakdown.svg)`, '');
    md.push(`| size | ${APPROACHES.map((a) => `${a} c / s / n`).join(' | ')} |`, `|---:|${APPROACHES.map(() => '---:').join('|')}|`);
    const part = (s: number, a: string, f: (r: Report) => number) => mean(kinds.map((k) => pair(k, s)).filter(Boolean).map((p) => med(p!.runs[a], f)));
    const groups: BarGroup[] = sizes.map((s) => ({
      label: sizeLabel(s),
      bars: APPROACHES.map((a) => ({ name: a, parts: (['client', 'server', 'network'] as const).map((n) => ({ name: n, value: part(s, a, (r) => r.timeMs[n]) })) })),
    }));
    for (const s of sizes) md.push(`| ${sizeLabel(s)} | ${APPROACHES.map((a) => (['client', 'server', 'network'] as const).map((n) => whole(part(s, a, (r) => r.timeMs[n]))).join(' / ')).join(' | ')} |`);
    md.push('', 'Milliseconds.', '');
    writeFileSync(join(OUT, 'fig14-breakdown.svg'), stackedBars({ title: 'Fig. 14 analogue: sync time breakdown, 10 MB mixed file', yTitle: 'time (ms)', groups, partNames: ['client', 'server', 'network'], footer: footer(doc.shaping.default) }));
    // Fig. 11
    const withMerge = syn.filter((p) => p.merging);
    if (withMerge.length) {
      md.push(`## Fig. 11 analogue: total traffic with merged Match Tokens / without merging`, '');
      md.push(`"Without merging" is computed from the same runs: the measured traffic with the Match Tokens replaced by one token per weak-matched chunk (8 B + one strong hash each), the chunk counts coming from the product's matcher on the same pair. The number of merged tokens computed this way equals the count the runs received.`, '');
      md.push(`![Fig. 11](fig11-merging.svg)`, '');
      md.push(`| edit | size | dsync-paper (SHA-1): tokens merged / unmerged, traffic ratio | dsync (BLAKE3): ratio |`, `|---|---:|---|---:|`);
      const ratio = (p: PairResult, a: string) => {
        const g = p.merging![a];
        const total = med(p.runs[a], (r) => r.traffic.total);
        const tok = med(p.runs[a], (r) => r.traffic.matchTokens);
        return total / (total - tok + g.unmergedTokenBytes);
      };
      for (const k of kinds)
        for (const s of sizes) {
          const p = withMerge.find((q) => q.kind === k && q.modSize === s);
          if (!p) continue;
          const g = p.merging!['dsync-paper'];
          md.push(`| ${k} | ${sizeLabel(s)} | ${g.tokens} / ${g.matchedChunks}: ${(100 * ratio(p, 'dsync-paper')).toFixed(1)}% | ${(100 * ratio(p, 'dsync')).toFixed(1)}% |`);
        }
      md.push('');
      const pm = (k: string, s: number) => withMerge.find((q) => q.kind === k && q.modSize === s);
      writeFileSync(
        join(OUT, 'fig11-merging.svg'),
        linePanels({
          title: 'Fig. 11 analogue: total traffic ratio, merged / unmerged Match Tokens',
          xLabels: sizes.map(sizeLabel),
          xTitle: 'modification size',
          yTitle: 'traffic after / before merging (%)',
          yMax: 100,
          panels: [
            { title: 'dsync-paper (SHA-1, paper setting)', series: kinds.map((k) => ({ name: k, values: sizes.map((s) => (pm(k, s) ? 100 * ratio(pm(k, s)!, 'dsync-paper') : null)) })) },
            { title: 'dsync (BLAKE3, 32 B hashes)', series: kinds.map((k) => ({ name: k, values: sizes.map((s) => (pm(k, s) ? 100 * ratio(pm(k, s)!, 'dsync') : null)) })) },
          ],
          footer: footer(doc.shaping.default),
        }),
      );
    }
    // Traffic next to rsync
    md.push(`## Traffic on every 10 MB pair, next to rsync`, '');
    md.push(`Bytes before compression (wire after permessage-deflate in parentheses); rsync: total bytes sent + received, without and with \`-z\`; zstd: the bytes of \`zstd -3 --long=27 --patch-from=BASIS TARGET\`, what a delta compressor holding both versions sends. Ratios to these floors: [traffic.md](traffic.md).`, '');
    md.push(`| edit | size | ${APPROACHES.join(' | ')} | rsync | rsync -z | zstd --patch-from |`, `|---|---:|${APPROACHES.map(() => '---:').join('|')}|---:|---:|---:|`);
    for (const k of kinds)
      for (const s of sizes) {
        const p = pair(k, s);
        if (p) md.push(`| ${k} | ${sizeLabel(s)} | ${APPROACHES.map((a) => `${bytes(med(p.runs[a], (r) => r.traffic.total))} (${bytes(med(p.runs[a], (r) => r.traffic.wire))})`).join(' | ')} | ${bytes(rsyncB(p))} | ${floorCells(p)} |`);
      }
    md.push('');
  }

  if (real.length) {
    md.push(`## Table III analogue: real version series (${doc.shaping.default})`, '');
    md.push(`Each row syncs one release onto the previous one (uncompressed npm tarballs; *npm-packed*: the same releases re-packed with a new mtime in every member header). Time: median; traffic before compression (wire).`, '');
    md.push(`| series: pair | size | ${APPROACHES.map((a) => `${a} time`).join(' | ')} | rsync time | ${APPROACHES.map((a) => `${a} traffic`).join(' | ')} | rsync bytes | rsync -z | zstd --patch-from |`);
    md.push(`|---|---:|${APPROACHES.map(() => '---:').join('|')}|---:|${APPROACHES.map(() => '---:').join('|')}|---:|---:|---:|`);
    for (const p of real) md.push(`| ${p.pair} | ${bytes(p.targetSize)} | ${APPROACHES.map((a) => secs(T(p, a))).join(' | ')} | ${secs(rsyncT(p))} | ${APPROACHES.map((a) => `${bytes(med(p.runs[a], (r) => r.traffic.total))} (${bytes(med(p.runs[a], (r) => r.traffic.wire))})`).join(' | ')} | ${bytes(rsyncB(p))} | ${floorCells(p)} |`);
    md.push('', 'Per series, summed over its pairs:', '');
    md.push(`| series | ${APPROACHES.map((a) => `${a} time`).join(' | ')} | rsync time | ${APPROACHES.map((a) => `${a} traffic`).join(' | ')} | rsync bytes | rsync -z | zstd --patch-from |`, `|---|${APPROACHES.map(() => '---:').join('|')}|---:|${APPROACHES.map(() => '---:').join('|')}|---:|---:|---:|`);
    for (const s of [...new Set(real.map((p) => p.pair.split(' ')[0]))]) {
      const ps = real.filter((p) => p.pair.split(' ')[0] === s);
      const sum = (f: (p: PairResult) => number) => ps.reduce((t, p) => t + f(p), 0);
      md.push(`| ${s} | ${APPROACHES.map((a) => secs(sum((p) => T(p, a)))).join(' | ')} | ${secs(sum(rsyncT))} | ${APPROACHES.map((a) => bytes(sum((p) => med(p.runs[a], (r) => r.traffic.total)))).join(' | ')} | ${bytes(sum(rsyncB))} | ${bytes(sum(rsyncZ))} | ${bytes(sum(zstdP))} |`);
    }
    md.push('');
  }

  if (large.length) {
    md.push(`## Fig. 17 analogue: large files (${doc.shaping.large})`, '');
    md.push(`![Fig. 17](fig17-large.svg)`, '');
    md.push(`| case | ${APPROACHES.map((a) => `${a} time (c / s / n)`).join(' | ')} | rsync | webr2sync+ / dsync | full / dsync |`, `|---|${APPROACHES.map(() => '---:').join('|')}|---:|---:|---:|`);
    for (const p of large) {
      md.push(`| ${p.pair} | ${APPROACHES.map((a) => `${secs(T(p, a))} (${(['client', 'server', 'network'] as const).map((n) => secs(med(p.runs[a], (r) => r.timeMs[n]))).join(' / ')})`).join(' | ')} | ${secs(rsyncT(p))} | ${x(T(p, 'webr2sync+') / T(p, 'dsync'))} | ${x(T(p, 'full') / T(p, 'dsync'))} |`);
    }
    md.push('', `| case | ${APPROACHES.map((a) => `${a} traffic (wire)`).join(' | ')} | rsync bytes | rsync -z | zstd --patch-from |`, `|---|${APPROACHES.map(() => '---:').join('|')}|---:|---:|---:|`);
    for (const p of large) md.push(`| ${p.pair} | ${APPROACHES.map((a) => `${bytes(med(p.runs[a], (r) => r.traffic.total))} (${bytes(med(p.runs[a], (r) => r.traffic.wire))})`).join(' | ')} | ${bytes(rsyncB(p))} | ${floorCells(p)} |`);
    md.push('');
    const groups: BarGroup[] = large.map((p) => ({
      label: p.pair,
      bars: [
        ...APPROACHES.map((a) => ({ name: a, parts: (['client', 'server', 'network'] as const).map((n) => ({ name: n, value: med(p.runs[a], (r) => r.timeMs[n]) / 1000 })) })),
        { name: 'rsync', parts: [{ name: 'rsync', value: rsyncT(p) / 1000 }] },
      ],
    }));
    writeFileSync(join(OUT, 'fig17-large.svg'), stackedBars({ title: 'Fig. 17 analogue: sync time of a 1 GiB file', yTitle: 'time (s)', groups, partNames: ['client', 'server', 'network', 'rsync'], footer: footer(doc.shaping.large) }));
  }

  md.push(`## Targets`, '');
  md.push(...targets(syn, large).map((t) => `- ${t}`), '');
  if (syn.length) md.push(...floorTable(syn), '');
  md.push(`Load (clients one server holds) is measured by \`npm run load\`: see [../load/](../load/).`, '');
  writeFileSync(join(OUT, 'summary.md'), md.join('\n'));
  writeFileSync(join(OUT, 'traffic.md'), trafficReport(doc).join('\n'));
}

/**
 * traffic.md: Dsync's wire bytes in its three modes — a client that pushed the basis itself
 * and kept its bytes (`dsync-kept`, the CLI), one that kept its chunk index and finer cut
 * (`dsync-known`, the page), another device (`dsync`) — next to the floors, on every pair:
 * zstd's patch (issue 26's target: a kept basis ≤ 1.5× it) and rsync -z both directions
 * (another device ≤ 1× it).
 */
export function trafficReport(doc: Doc): string[] {
  const res: PairResult[] = doc.results;
  const md = [`# Traffic: Dsync's wire bytes next to zstd --patch-from and rsync -z`, '', `- **Command:** \`${doc.command}\` (${doc.date})`];
  md.push(`- Wire bytes: what the WebSocket carried (after permessage-deflate), median; *dsync-kept*: the client pushed the basis itself and kept its bytes (the CLI); *dsync-known*: it kept the basis's chunk index and finer cut (the page); *dsync*: another device. rsync -z: bytes sent + received. zstd: \`zstd -3 --long=27 --patch-from=BASIS TARGET\`.`, '');
  md.push('| section | pair | size | dsync-kept | dsync-known | dsync | rsync -z | zstd --patch-from | dsync-kept / zstd | dsync-known / zstd | dsync / rsync -z |', '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const p of res) md.push(`| ${p.section} | ${p.pair} | ${bytes(p.targetSize)} | ${bytes(W(p, 'dsync-kept'))} | ${bytes(W(p, 'dsync-known'))} | ${bytes(W(p, 'dsync'))} | ${floorCells(p)} | ${x(W(p, 'dsync-kept') / zstdP(p))} | ${x(W(p, 'dsync-known') / zstdP(p))} | ${x(W(p, 'dsync') / rsyncZ(p))} |`);
  md.push('');
  const met = (f: (p: PairResult) => number, limit: number) => `${res.filter((p) => f(p) <= limit).length} of ${res.filter((p) => Number.isFinite(f(p))).length}`;
  md.push(`Issue 26's targets: a kept basis at most 1.5× zstd's patch on ${met((p) => W(p, 'dsync-kept') / zstdP(p), 1.5)} pairs (the chunk index alone: ${met((p) => W(p, 'dsync-known') / zstdP(p), 1.5)}); another device at or below rsync -z on ${met((p) => W(p, 'dsync') / rsyncZ(p), 1)}.`, '');
  return md;
}

/** Round-trip time and bandwidth (bits per ms) of a shaping description (procs.ts describeShaping). */
function link(shaping: string): { rttMs: number; bitsPerMs: number } | null {
  const bw = shaping.match(/bandwidth ([\d.]+) (Mbps|Gbps)/);
  const rtt = shaping.match(/RTT ([\d.]+) ms/);
  return bw && rtt ? { rttMs: Number(rtt[1]), bitsPerMs: Number(bw[1]) * (bw[2] === 'Gbps' ? 1e6 : 1e3) } : null;
}

/**
 * What the 2× target asks of each 10 MB edit: the least time any protocol of two round trips
 * (list → tokens, Delta Bytes → Result) needs to carry dsync's bytes over the link — its
 * upload at the link's rate plus the two round trips, with no time at all to compute — next
 * to half of webr2sync+'s measured time. Where the floor is above that half, no client or
 * server speed-up can reach 2× with these bytes.
 */
function floorTable(syn: PairResult[]): string[] {
  const l = link(syn[0].shaping);
  if (!l) return [];
  // the upload: the wire bytes less what came down (Match Tokens, Basis Checksums, and all
  // control messages, counted in full: a lower bound)
  const floor = (p: PairResult, a: string, trips: number) => trips * l.rttMs + (med(p.runs[a], (r) => r.traffic.wire - r.traffic.matchTokens - (r.traffic.basisChecksums ?? 0) - r.traffic.control) * 8) / l.bitsPerMs;
  const rows = syn.map((p) => ({ p, floor: floor(p, 'dsync', 2), known: floor(p, 'dsync-known', 1), half: T(p, 'webr2sync+') / 2 }));
  const out = rows.filter((r) => r.floor > r.half).length;
  const outKnown = rows.filter((r) => r.known > r.half).length;
  return [
    `What 2× would take on each 10 MB edit: *floor* = two round trips (${l.rttMs} ms each) + dsync's upload (wire bytes) at ${l.bitsPerMs / 1000} Mbps, the time no protocol of two round trips can beat with these bytes even if client and server took no time; *known floor* = the same for dsync-known's one round trip (where its change was small enough to push against the known version; else its three phases make it a floor it did not need to beat). 2× needs a time at or below half of webr2sync+'s. Out of reach on ${out} of ${rows.length} edits for the three phases${rows.some((r) => Number.isFinite(r.known)) ? `, on ${outKnown} for dsync-known` : ''}.`,
    '',
    '| edit | dsync | floor | dsync-known | known floor | webr2sync+ / 2 | 2× within reach of the three phases |',
    '|---|---:|---:|---:|---:|---:|---|',
    ...rows.map((r) => `| ${r.p.pair} | ${secs(T(r.p, 'dsync'))} | ${secs(r.floor)} | ${secs(T(r.p, 'dsync-known'))} | ${secs(r.known)} | ${secs(r.half)} | ${r.floor > r.half ? 'no' : `yes, with ${secs(r.half - r.floor)} for all computing`} |`),
  ];
}

/** The issue's targets, each with its measured numbers and whether it is met. */
export function targets(syn: PairResult[], large: PairResult[]): string[] {
  const out: string[] = [];
  for (const a of ['dsync', 'dsync-known'].filter((a) => syn.some((p) => p.runs[a]?.length))) {
    const w = syn.map((p) => ({ p: p.pair, r: T(p, 'webr2sync+') / T(p, a) }));
    const d = syn.map((p) => ({ p: p.pair, r: T(p, 'dedup') / T(p, a) }));
    const minW = w.reduce((a, b) => (b.r < a.r ? b : a));
    const minD = d.reduce((a, b) => (b.r < a.r ? b : a));
    out.push(`${a} ≥ 2× faster than webr2sync+ at every modification size (100 Mbps, 10 MB): **${w.every((q) => q.r >= 2) ? 'met' : 'not met'}** — met on ${w.filter((q) => q.r >= 2).length}/${w.length} edits; speed-up ${x(Math.min(...w.map((q) => q.r)))} (${minW.p}) to ${x(Math.max(...w.map((q) => q.r)))}, median ${x(median(w.map((q) => q.r)))}.`);
    out.push(`${a} faster than dedup (100 Mbps, 10 MB): **${d.every((q) => q.r > 1) ? 'met' : 'not met'}** — faster on ${d.filter((q) => q.r > 1).length}/${d.length} edits; dedup / ${a} ${x(Math.min(...d.map((q) => q.r)))} (${minD.p}) to ${x(Math.max(...d.map((q) => q.r)))}, median ${x(median(d.map((q) => q.r)))}.`);
  }
  for (const p of large) {
    const w = T(p, 'webr2sync+') / T(p, 'dsync');
    const f = T(p, 'full') / T(p, 'dsync');
    out.push(`${p.pair} at 1 Gbps: dsync ≥ 5× faster than webr2sync+: **${w >= 5 ? 'met' : 'not met'}** (${x(w)}); faster than full: **${f > 1 ? 'met' : 'not met'}** (${x(f)}).`);
  }
  return out;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  // node --import tsx bench/eval/report.ts [DIR]: DIR/results.json -> DIR/summary.md and figures
  const dir = process.argv[2] ?? DEFAULT_OUT;
  writeReport(JSON.parse(readFileSync(join(dir, 'results.json'), 'utf8')), dir);
  console.error(`[eval] wrote ${join(dir, 'summary.md')} and the figures`);
}
