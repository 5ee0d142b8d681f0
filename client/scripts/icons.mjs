// Draws the page's app icons (client/public/icons/icon-{192,512}.png and the maskable 512):
// the favicon's picture, a white arrow on a blue rounded square, as PNG, with Node's zlib only.
// Run once when the picture changes: node client/scripts/icons.mjs
import { writeFileSync } from 'node:fs';
import { deflateSync } from 'node:zlib';

const out = new URL('../public/icons/', import.meta.url);
const BLUE = [0x25, 0x63, 0xeb];

const CRC = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
function crc32(b) {
  let c = 0xffffffff;
  for (const x of b) c = CRC[(c ^ x) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}
function chunk(type, data) {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(data.length);
  const td = Buffer.concat([Buffer.from(type), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(td));
  return Buffer.concat([len, td, crc]);
}

/** Distance from point p to segment a–b. */
function seg(px, py, ax, ay, bx, by) {
  const dx = bx - ax, dy = by - ay;
  const t = Math.max(0, Math.min(1, ((px - ax) * dx + (py - ay) * dy) / (dx * dx + dy * dy)));
  return Math.hypot(px - (ax + t * dx), py - (ay + t * dy));
}

/** An RGBA PNG of `size` px; `maskable`: the square fills the canvas (the platform rounds it)
 *  and the arrow keeps to the safe zone. */
function icon(size, maskable) {
  const s = size / 16; // the favicon's 16-unit grid
  const scale = maskable ? 0.6 : 1;
  const raw = Buffer.alloc(size * (size * 4 + 1));
  for (let y = 0; y < size; y++) {
    raw[y * (size * 4 + 1)] = 0;
    for (let x = 0; x < size; x++) {
      // the grid's point, the arrow scaled about the centre when maskable
      const gx = (x + 0.5) / s, gy = (y + 0.5) / s;
      const r = 3, inSquare = maskable || (() => {
        const cx = Math.min(Math.max(gx, r), 16 - r), cy = Math.min(Math.max(gy, r), 16 - r);
        return Math.hypot(gx - cx, gy - cy) <= r;
      })();
      const ax = 8 + (gx - 8) / scale, ay = 8 + (gy - 8) / scale;
      const d = Math.min(seg(ax, ay, 4, 8, 12, 8), seg(ax, ay, 8, 4, 12, 8), seg(ax, ay, 12, 8, 8, 12));
      const white = d <= 1;
      const o = y * (size * 4 + 1) + 1 + x * 4;
      const [cr, cg, cb] = white ? [255, 255, 255] : BLUE;
      raw[o] = cr;
      raw[o + 1] = cg;
      raw[o + 2] = cb;
      raw[o + 3] = inSquare ? 255 : 0;
    }
  }
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(size, 0);
  ihdr.writeUInt32BE(size, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 6; // RGBA
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', ihdr), chunk('IDAT', deflateSync(raw, { level: 9 })), chunk('IEND', Buffer.alloc(0))]);
}

writeFileSync(new URL('icon-192.png', out), icon(192, false));
writeFileSync(new URL('icon-512.png', out), icon(512, false));
writeFileSync(new URL('icon-maskable-512.png', out), icon(512, true));
