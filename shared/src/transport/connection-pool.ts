/**
 * Socket reuse, in one place: open connections to the server's /sync endpoints, kept between
 * sessions. The server runs sessions one after another on one socket (docs/protocol.md §3), so
 * a folder's files, or a file pushed again after an edit, skip the TCP and WebSocket handshakes
 * (two round trips). A session takes a connection to its URL (an idle one, else a new one) and
 * gives it back; one that closed meanwhile (an error, a lost socket, the server's idle timeout)
 * is dropped. A taken connection is the taker's alone: sessions at once never share one.
 *
 * A session's URL carries its file's routing hint (route.ts): an idle connection opened with
 * the same hint is taken first, else one opened for another file (its sessions then go where
 * that file's go: a folder's files keep to one connection, and so to one server process).
 */
import { Conn, type WebSocketCtor } from './conn.ts';
import { sameEndpoint } from './route.ts';

/** Where the sync client takes a session's connection from and gives it back to. `alt`: a URL
 *  the session runs as well on (the other compression mode, for a small file): an idle
 *  connection to it is taken before a new one to `url` is opened. */
export interface Connections {
  take(url: string, alt?: string): Promise<Conn>;
  give(conn: Conn): void;
}

export class ConnectionPool implements Connections {
  private idle: Conn[] = [];
  private readonly all = new Set<Conn>();

  /** `keepIdle`: at most this many idle connections are kept; one given back beyond closes. */
  constructor(
    private readonly WebSocket: WebSocketCtor,
    private readonly keepIdle = Infinity,
  ) {}

  /** An idle open connection to `url` (with its hint, else with another), else to `alt`
   *  (likewise; see `Connections`), else a new one to `url` (opened with `WebSocket`). */
  async take(url: string, alt?: string, WebSocket = this.WebSocket): Promise<Conn> {
    for (const c of this.idle) if (!c.usable) this.drop(c);
    let i = -1;
    for (const u of alt === undefined ? [url] : [url, alt]) {
      if (i < 0) i = this.idle.findIndex((c) => c.url === u);
      if (i < 0) i = this.idle.findIndex((c) => sameEndpoint(c.url, u));
    }
    if (i >= 0) return this.idle.splice(i, 1)[0];
    const c = await Conn.open(url, WebSocket);
    this.all.add(c);
    return c;
  }

  /** Keeps `conn` for the next session while it is open (and `keep`), else closes it. */
  give(conn: Conn, keep = true): void {
    if (keep && conn.usable && this.idle.length < this.keepIdle) this.idle.push(conn);
    else this.drop(conn);
  }

  /** Closes every connection, idle or taken. */
  close(): void {
    for (const c of this.all) c.close(1000, 'done');
    this.all.clear();
    this.idle = [];
  }

  private drop(conn: Conn): void {
    this.idle = this.idle.filter((c) => c !== conn);
    this.all.delete(conn);
    conn.close(1000, 'done');
  }
}
