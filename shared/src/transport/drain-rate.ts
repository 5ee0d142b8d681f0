/**
 * The rate at which a socket sends what it buffered: the wire's pace, or the peer's, not the
 * sender's. Conn samples its socket at each `hasRoom`; a socket run in another thread samples
 * itself there (client/src/socket-worker.ts), where its buffer is seen as it is.
 */

/** The time constant of the rate's average, and how much time it needs to tell. */
const RATE_TAU_MS = 1000;
const RATE_MIN_MS = 50;

export class DrainRate {
  private last: { t: number; drained: number; buffered: number } | null = null;
  private fullMs = 0;
  private drainedWhileFull = 0;

  /** A sample: `sent` bytes handed to the socket in all, `buffered` of them not yet sent. */
  see(sent: number, buffered: number, t = performance.now()): void {
    const drained = sent - buffered;
    const last = this.last;
    if (last && last.buffered > 0 && buffered > 0 && t > last.t) {
      const d = Math.exp(-(t - last.t) / RATE_TAU_MS);
      this.fullMs = this.fullMs * d + (t - last.t);
      this.drainedWhileFull = this.drainedWhileFull * d + (drained - last.drained);
    }
    this.last = { t, drained, buffered };
  }

  /** Bytes per ms sent over about the last second (RATE_TAU_MS, decaying) of the times the
   *  socket held bytes throughout (between two samples that found it not empty); null until it
   *  held bytes for RATE_MIN_MS. */
  rate(): number | null {
    return this.fullMs >= RATE_MIN_MS ? this.drainedWhileFull / this.fullMs : null;
  }
}
