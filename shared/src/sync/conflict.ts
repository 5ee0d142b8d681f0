/**
 * Conflict copies (docs/sync.md, "Conflicts"). When a device's change meets a newer version
 * from another device, the server's version keeps the name and the device's bytes go up under
 * a conflict name beside it:
 *
 *   docs/report.pdf  →  docs/report (conflict from laptop 2026-11-26 1530).pdf
 *
 * The marker goes before the extension, so the copy still opens with the program that opens
 * the original (Dropbox's rule; Syncthing's `.sync-conflict-…` also keeps the extension last).
 * A conflict of a conflict copy replaces its marker instead of adding a second one, so copies do
 * not grow names like `a (conflict …) (conflict …).txt`. The name stays valid for the server
 * (shared/src/wire/names.ts): the device label is reduced to letters, digits, spaces, '-' and '_'
 * (a dot becomes '-', so the label never looks like an extension), at most DEVICE_LABEL_MAX
 * characters. An extension is what follows the last dot, when it is short and has no space.
 */
import { MAX_COMPONENT_BYTES } from '../base/limits.ts';

const bytes = (s: string) => new TextEncoder().encode(s).length;

/** Longest device label kept in a conflict name. */
export const DEVICE_LABEL_MAX = 32;

/** Extensions of two parts that loaders read as one (`x.tar.gz` stays `x (…).tar.gz`). */
const DOUBLE = /\.tar\.(gz|bz2|xz|zst|lz4|lz|Z)$/i;
/** An extension: a dot and up to 16 characters, none a space or a dot. */
const EXTENSION = /\.[^. ]{1,16}$/;
/** A marker made by conflictName, with the space before it. */
const MARKER = / \(conflict from [^()/]*? \d{4}-\d{2}-\d{2} \d{4}(?: \d+)?\)/;

/** The device label as it may appear in a name. */
export function deviceLabel(device: string): string {
  const cleaned = device
    .normalize('NFC')
    .replace(/\./g, '-')
    .replace(/[^\p{L}\p{N} _-]+/gu, ' ')
    .replace(/\s+/g, ' ')
    .trim()
    .slice(0, DEVICE_LABEL_MAX)
    .trimEnd();
  return /[\p{L}\p{N}]/u.test(cleaned) ? cleaned : 'another device';
}

/** `name` split into its folder prefix (with the '/'), its stem and its extension (with the dot). */
function splitName(name: string): [string, string, string] {
  const slash = name.lastIndexOf('/');
  const dir = name.slice(0, slash + 1);
  const base = name.slice(slash + 1);
  const double = DOUBLE.exec(base);
  // a leading dot is part of the stem (".bashrc" has no extension)
  const ext = double ?? EXTENSION.exec(base);
  return ext && ext.index > 0 ? [dir, base.slice(0, ext.index), base.slice(ext.index)] : [dir, base, ''];
}

/** The local time as `YYYY-MM-DD HHMM`. */
function stamp(when: Date): string {
  const p = (n: number) => String(n).padStart(2, '0');
  return `${when.getFullYear()}-${p(when.getMonth() + 1)}-${p(when.getDate())} ${p(when.getHours())}${p(when.getMinutes())}`;
}

/**
 * The conflict name for the bytes of `device` at `name`, made at `when`. `taken` says whether a
 * candidate already exists (on the server or locally); a number is added until one is free.
 */
export function conflictName(name: string, device: string, when: Date, taken: (candidate: string) => boolean = () => false): string {
  const [dir, stem, ext] = splitName(name);
  const marker = ` (conflict from ${deviceLabel(device)} ${stamp(when)}`;
  for (let n = 1; ; n++) {
    const tail = `${marker}${n > 1 ? ` ${n}` : ''})${ext}`;
    // a long stem is shortened so the component stays within the server's limit
    let bare = stem.replace(MARKER, '');
    while (bytes(bare + tail) > MAX_COMPONENT_BYTES) bare = [...bare].slice(0, -1).join('');
    const candidate = `${dir}${bare.trimEnd()}${tail}`;
    if (!taken(candidate)) return candidate;
  }
}

/** Whether `name` is a conflict copy made by conflictName. */
export function isConflictName(name: string): boolean {
  return MARKER.test(splitName(name)[1]);
}
