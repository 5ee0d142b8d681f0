// Waiting for an event in a test (harness: shared by the tests). A test on a loaded machine
// waits for what it needs to have happened (a checkpoint listed, a log line, a socket closed),
// never for a fixed time; the timeout is generous and only turns a hang into a clear failure.

/** Polls `cond` until it holds; fails after `ms` naming `what`. */
export async function until(what: string, cond: () => boolean | Promise<boolean>, ms = 120_000, everyMs = 50): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
