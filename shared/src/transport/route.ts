/**
 * The routing hint of a sync connection: `/sync?route=R`, where R is the first 8 hex digits of
 * the SHA-256 of the name of the connection's first session's file, as the client sends it in
 * Hello. `dsync serve --workers N` hands a connection with a hint to worker R mod N (and a load
 * balancer can hash on it too: docs/deploy.md), so that one file's pushes and pulls meet the
 * caches of the process that served its last one. A hash, not the name: file names do not land
 * in proxies' logs. It is a hint only: the server reads nothing else from it, and a session's
 * name is always its Hello's.
 */
import { sha256 } from '@noble/hashes/sha2';
import { bytesToHex as hex } from '@noble/hashes/utils';

export const ROUTE_PARAM = 'route';
/** Hex digits of a hint. */
const ROUTE_DIGITS = 8;

/** The hint of a file's sessions. */
export const routeOf = (name: string): string => hex(sha256(new TextEncoder().encode(name))).slice(0, ROUTE_DIGITS);

/** `url` with the hint of `name`'s sessions. */
export function withRoute(url: string, name: string): string {
  const u = new URL(url);
  u.searchParams.set(ROUTE_PARAM, routeOf(name));
  return u.toString();
}

/** The number a hint stands for, or null when `value` is not one (absent, not hex, too long). */
export function routeNumber(value: string | null): number | null {
  return value !== null && /^[0-9a-f]{1,8}$/i.test(value) ? parseInt(value, 16) : null;
}

/** Whether two sync URLs differ at most in their hints: a connection opened to one can run the
 *  other's session (the server reads the same endpoint). */
export function sameEndpoint(a: string, b: string): boolean {
  const strip = (url: string) => {
    const u = new URL(url);
    u.searchParams.delete(ROUTE_PARAM);
    return u.toString();
  };
  return strip(a) === strip(b);
}
