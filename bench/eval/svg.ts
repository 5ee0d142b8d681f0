/** Minimal hand-written SVG charts (no plotting dependency): line panels and stacked bars. */

export const COLORS: Record<string, string> = {
  dsync: '#d62728',
  'dsync-paper': '#ff7f0e',
  'webr2sync+': '#1f77b4',
  dedup: '#2ca02c',
  full: '#7f7f7f',
  rsync: '#9467bd',
  client: '#4e79a7',
  server: '#e15759',
  network: '#bab0ac',
  cut: '#1f77b4',
  insert: '#d62728',
  inverse: '#2ca02c',
};
const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
const text = (x: number, y: number, s: string, o: { size?: number; anchor?: string; weight?: string; rotate?: boolean } = {}) =>
  `<text x="${x.toFixed(1)}" y="${y.toFixed(1)}" font-size="${o.size ?? 11}" text-anchor="${o.anchor ?? 'start'}"${o.weight ? ` font-weight="${o.weight}"` : ''}${o.rotate ? ` transform="rotate(-90 ${x.toFixed(1)} ${y.toFixed(1)})"` : ''}>${esc(s)}</text>`;

/** A "nice" axis maximum and tick step. */
function ticks(max: number): { top: number; step: number } {
  if (!(max > 0)) return { top: 1, step: 0.25 };
  const raw = max / 5;
  const p = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * p).find((s) => s >= raw)!;
  return { top: Math.ceil(max / step) * step, step };
}
const fmt = (v: number) => (Math.abs(v) >= 1000 ? `${+(v / 1000).toFixed(1)}k` : `${+v.toFixed(2)}`);

export interface LineSeries {
  name: string;
  values: (number | null)[];
  dash?: boolean;
  color?: string;
}
export interface Panel {
  title: string;
  series: LineSeries[];
}

/** Splits footer lines to fit the figure's width (about 5.6 px per character at 10 px). */
function wrap(lines: string[], width: number): string[] {
  const max = Math.floor((width - 20) / 5.6);
  const out: string[] = [];
  for (let l of lines) {
    while (l.length > max) {
      const cut = l.lastIndexOf(' ', max) > max / 2 ? l.lastIndexOf(' ', max) : max;
      out.push(l.slice(0, cut));
      l = '    ' + l.slice(cut).trimStart();
    }
    out.push(l);
  }
  return out;
}

function frame(width: number, height: number, title: string, footerLines: string[], body: string): string {
  const footer = wrap(footerLines, width);
  const fh = footer.length * 13 + 8;
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height + fh}" font-family="Helvetica, Arial, sans-serif">
<rect width="100%" height="100%" fill="white"/>
${text(width / 2, 20, title, { size: 14, anchor: 'middle', weight: 'bold' })}
${body}
${footer.map((l, i) => text(10, height + 12 + i * 13, l, { size: 10 })).join('\n')}
</svg>
`;
}

function legend(x: number, y: number, items: { name: string; color: string; dash?: boolean }[]): string {
  return items
    .map((it, i) => {
      const yy = y + i * 15;
      return `<line x1="${x}" y1="${yy}" x2="${x + 22}" y2="${yy}" stroke="${it.color}" stroke-width="3"${it.dash ? ' stroke-dasharray="5,3"' : ''}/>${text(x + 27, yy + 4, it.name)}`;
    })
    .join('\n');
}

/** Side-by-side line panels sharing categorical x labels and one y label. */
export function linePanels(o: { title: string; xLabels: string[]; xTitle: string; yTitle: string; panels: Panel[]; footer: string[]; yMax?: number }): string {
  const pw = Math.max(300, 26 * o.xLabels.length);
  const ph = 240;
  const left = 60;
  const top = 40;
  const legendW = 150;
  const width = left + o.panels.length * (pw + 20) + legendW;
  const height = top + ph + 50;
  const all = o.panels.flatMap((p) => p.series.flatMap((s) => s.values.filter((v): v is number => v !== null)));
  const { top: yTop, step } = ticks(o.yMax ?? Math.max(...all));
  let body = '';
  o.panels.forEach((p, k) => {
    const x0 = left + k * (pw + 20);
    const X = (i: number) => x0 + (pw * (i + 0.5)) / o.xLabels.length;
    const Y = (v: number) => top + ph - (ph * Math.min(v, yTop)) / yTop;
    body += `<rect x="${x0}" y="${top}" width="${pw}" height="${ph}" fill="none" stroke="#999"/>`;
    body += text(x0 + pw / 2, top - 6, p.title, { anchor: 'middle', weight: 'bold' });
    for (let v = 0; v <= yTop + 1e-9; v += step) {
      body += `<line x1="${x0}" y1="${Y(v)}" x2="${x0 + pw}" y2="${Y(v)}" stroke="#eee"/>`;
      if (k === 0) body += text(x0 - 5, Y(v) + 4, fmt(v), { anchor: 'end', size: 10 });
    }
    o.xLabels.forEach((l, i) => (body += text(X(i), top + ph + 14, l, { anchor: 'middle', size: 10 })));
    body += text(x0 + pw / 2, top + ph + 32, o.xTitle, { anchor: 'middle' });
    for (const s of p.series) {
      const color = s.color ?? COLORS[s.name] ?? '#000';
      const pts = s.values.map((v, i) => (v === null ? null : `${X(i).toFixed(1)},${Y(v).toFixed(1)}`)).filter(Boolean);
      body += `<polyline fill="none" stroke="${color}" stroke-width="2"${s.dash ? ' stroke-dasharray="5,3"' : ''} points="${pts.join(' ')}"/>`;
      s.values.forEach((v, i) => v !== null && (body += `<circle cx="${X(i).toFixed(1)}" cy="${Y(v).toFixed(1)}" r="2.5" fill="${color}"/>`));
    }
  });
  body += text(16, top + ph / 2, o.yTitle, { rotate: true, anchor: 'middle' });
  const names = o.panels[0].series.map((s) => ({ name: s.name, color: s.color ?? COLORS[s.name] ?? '#000', dash: s.dash }));
  body += legend(left + o.panels.length * (pw + 20) + 5, top + 10, names);
  return frame(width, height, o.title, o.footer, body);
}

export interface BarGroup {
  label: string;
  bars: { name: string; parts: { name: string; value: number }[] }[];
}

/** Grouped bars, each stacked from its parts (e.g. client / server / network time). */
export function stackedBars(o: { title: string; yTitle: string; groups: BarGroup[]; footer: string[]; partNames: string[] }): string {
  const left = 60;
  const top = 40;
  const barW = 16;
  const gap = 3;
  const groupGap = 26;
  const nb = Math.max(...o.groups.map((g) => g.bars.length));
  const gw = nb * (barW + gap) + groupGap;
  const ph = 260;
  const width = Math.max(500, left + o.groups.length * gw + 150);
  const height = top + ph + 95;
  const max = Math.max(...o.groups.flatMap((g) => g.bars.map((b) => b.parts.reduce((s, p) => s + p.value, 0))));
  const { top: yTop, step } = ticks(max);
  const Y = (v: number) => top + ph - (ph * v) / yTop;
  let body = '';
  for (let v = 0; v <= yTop + 1e-9; v += step) {
    body += `<line x1="${left}" y1="${Y(v)}" x2="${left + o.groups.length * gw}" y2="${Y(v)}" stroke="#eee"/>${text(left - 5, Y(v) + 4, fmt(v), { anchor: 'end', size: 10 })}`;
  }
  o.groups.forEach((g, gi) => {
    const gx = left + gi * gw + groupGap / 2;
    g.bars.forEach((b, bi) => {
      const x = gx + bi * (barW + gap);
      let acc = 0;
      for (const p of b.parts) {
        const h = (ph * p.value) / yTop;
        body += `<rect x="${x}" y="${Y(acc + p.value).toFixed(1)}" width="${barW}" height="${Math.max(0, h).toFixed(1)}" fill="${COLORS[p.name] ?? COLORS[b.name] ?? '#888'}" stroke="${COLORS[b.name] ?? '#333'}" stroke-width="1.5"/>`;
        acc += p.value;
      }
      body += text(x + barW / 2 + 3, top + ph + 6, b.name, { size: 9, rotate: true, anchor: 'end' });
    });
    body += text(gx + (g.bars.length * (barW + gap)) / 2, top + ph + 80, g.label, { anchor: 'middle' });
  });
  body += `<line x1="${left}" y1="${top + ph}" x2="${left + o.groups.length * gw}" y2="${top + ph}" stroke="#333"/>`;
  body += text(16, top + ph / 2, o.yTitle, { rotate: true, anchor: 'middle' });
  body += legend(left + o.groups.length * gw + 10, top + 10, o.partNames.map((n) => ({ name: n, color: COLORS[n] ?? '#888' })));
  body += text(left + o.groups.length * gw + 10, top + 20 + o.partNames.length * 15, 'bar outline: approach', { size: 9 });
  return frame(width, height, o.title, o.footer, body);
}
