/**
 * File names. A name is a '/'-separated relative path (folders synced from a browser keep
 * their structure). It is normalised to Unicode NFC and must be portable and harmless on every
 * common file system, so a name is refused, never silently rewritten, when it has:
 * an empty, "." or ".." component; a leading or trailing '/'; a backslash, NUL or another
 * control character; a component ending in '.' or ' '; a reserved Windows device name
 * (CON, PRN, AUX, NUL, COM1–9, LPT1–9, with any extension); a component over 255 bytes or a
 * name over 1024 bytes (UTF-8).
 *
 * One implementation for the server (every name it receives or reads back) and the clients
 * (every name a server lists, before it becomes a path): shared code without node-only modules.
 */
import { ErrorCode, ProtocolError } from './protocol.ts';
import { MAX_COMPONENT_BYTES, MAX_NAME_BYTES } from '../base/limits.ts';

export { MAX_COMPONENT_BYTES, MAX_NAME_BYTES };
const RESERVED = /^(con|prn|aux|nul|com[1-9]|lpt[1-9])(\..*)?$/i;
// C0 and C1 control characters and DEL
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

/** The length of `s` in UTF-8 bytes (a lone surrogate counts as U+FFFD, 3 bytes, as TextEncoder writes it). */
export function utf8Length(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n += 4;
      i++;
    } else n += 3;
  }
  return n;
}

/** Returns the normalised name or throws ProtocolError(BadName) saying why. */
export function validateName(raw: string): string {
  const bad = (why: string): never => {
    throw new ProtocolError(ErrorCode.BadName, `invalid file name: ${why}`);
  };
  const name = raw.normalize('NFC');
  if (name.length === 0) bad('empty');
  if (utf8Length(name) > MAX_NAME_BYTES) bad(`longer than ${MAX_NAME_BYTES} bytes`);
  if (CONTROL.test(name)) bad('contains a control character');
  if (name.includes('\\')) bad('contains a backslash');
  if (name.startsWith('/')) bad('absolute path');
  for (const c of name.split('/')) {
    if (c === '') bad('empty path component');
    if (c === '.' || c === '..') bad(`"${c}" component`);
    if (utf8Length(c) > MAX_COMPONENT_BYTES) bad(`component longer than ${MAX_COMPONENT_BYTES} bytes`);
    if (/[. ]$/.test(c)) bad('component ends in a dot or space');
    if (RESERVED.test(c)) bad(`"${c}" is a reserved device name`);
  }
  return name;
}

/** Characters Windows refuses in a file name (a ':' would also name a drive or a stream). */
const NOT_ON_WINDOWS = /[:<>"|?*]/;

/** Why `raw` is not a valid name (the message validateName throws), or null when it is.
 *  `windows`: also refuses what a Windows file system cannot hold (':' and `<>"|?*`, which
 *  make drive letters and streams; reserved device names and trailing dots and spaces are
 *  refused everywhere already). */
export function nameProblem(raw: unknown, o: { windows?: boolean } = {}): string | null {
  if (typeof raw !== 'string') return 'invalid file name: not a string';
  try {
    const name = validateName(raw);
    if (o.windows && NOT_ON_WINDOWS.test(name)) return 'invalid file name here: Windows cannot hold : < > " | ? *';
    return null;
  } catch (e) {
    return (e as Error).message;
  }
}

/** The normalised name, or null when `raw` is not a valid name (for clients, which skip such a
 *  name with a note instead of failing); `windows` as for nameProblem. */
export function checkedName(raw: unknown, o: { windows?: boolean } = {}): string | null {
  return nameProblem(raw, o) === null ? (raw as string).normalize('NFC') : null;
}

/** A name as text safe to print: quoted, with control characters escaped (a hostile name
 *  cannot move the cursor or clear a terminal). */
export function shownName(raw: unknown): string {
  if (typeof raw !== 'string') return String(raw);
  return `"${raw.replace(/["\\\u0000-\u001f\u007f-\u009f]/g, (c) => (c === '"' || c === '\\' ? '\\' + c : `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`))}"`;
}
