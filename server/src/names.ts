/**
 * File names. A name is a '/'-separated relative path (folders synced from a browser keep
 * their structure). It is normalised to Unicode NFC and must be portable and harmless on every
 * common file system, so a name is refused, never silently rewritten, when it has:
 * an empty, "." or ".." component; a leading or trailing '/'; a backslash, NUL or another
 * control character; a component ending in '.' or ' '; a reserved Windows device name
 * (CON, PRN, AUX, NUL, COM1–9, LPT1–9, with any extension); a component over 255 bytes or a
 * name over 1024 bytes (UTF-8).
 */
import { ErrorCode, ProtocolError } from '../../shared/src/protocol.ts';
import { MAX_COMPONENT_BYTES, MAX_NAME_BYTES } from '../../shared/src/limits.ts';

export { MAX_COMPONENT_BYTES, MAX_NAME_BYTES };
const RESERVED = /^(con|prn|aux|nul|com[1-9]|lpt[1-9])(\..*)?$/i;
// C0 and C1 control characters and DEL
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

/** Returns the normalised name or throws ProtocolError(BadName) saying why. */
export function validateName(raw: string): string {
  const bad = (why: string): never => {
    throw new ProtocolError(ErrorCode.BadName, `invalid file name: ${why}`);
  };
  const name = raw.normalize('NFC');
  if (name.length === 0) bad('empty');
  if (Buffer.byteLength(name, 'utf8') > MAX_NAME_BYTES) bad(`longer than ${MAX_NAME_BYTES} bytes`);
  if (CONTROL.test(name)) bad('contains a control character');
  if (name.includes('\\')) bad('contains a backslash');
  if (name.startsWith('/')) bad('absolute path');
  for (const c of name.split('/')) {
    if (c === '') bad('empty path component');
    if (c === '.' || c === '..') bad(`"${c}" component`);
    if (Buffer.byteLength(c, 'utf8') > MAX_COMPONENT_BYTES) bad(`component longer than ${MAX_COMPONENT_BYTES} bytes`);
    if (/[. ]$/.test(c)) bad('component ends in a dot or space');
    if (RESERVED.test(c)) bad(`"${c}" is a reserved device name`);
  }
  return name;
}
