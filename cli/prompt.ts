/** What the CLI reads from its user: a password or a token typed without echo, or a line of
 *  stdin (`dsync adduser`, `dsync login`). */

/** The longest password read (a line of stdin is cut off beyond). */
const MAX_PASSWORD = 1024;

/** Reads a line from the terminal without echoing it (a password here, a token in dsync login). */
export function askHidden(prompt: string, what = 'password'): Promise<string> {
  return new Promise((resolve, reject) => {
    const stdin = process.stdin;
    let typed = '';
    const done = () => {
      stdin.off('data', onData);
      stdin.setRawMode(false);
      stdin.pause();
      process.stderr.write('\n');
    };
    const onData = (chunk: string) => {
      for (const c of chunk) {
        if (c === '\r' || c === '\n') return void (done(), resolve(typed));
        if (c === '\u0003' || c === '\u0004') return void (done(), reject(new Error(`no ${what} given`)));
        if (c === '\u007f' || c === '\b') typed = [...typed].slice(0, -1).join('');
        else if (typed.length < MAX_PASSWORD) typed += c;
      }
    };
    // echo is off before the prompt shows: what is typed right after it is never echoed
    stdin.setRawMode(true);
    stdin.setEncoding('utf8');
    stdin.on('data', onData);
    stdin.resume();
    process.stderr.write(prompt);
  });
}

/** The first line of stdin, without its line end. */
export async function stdinLine(): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of process.stdin as AsyncIterable<Buffer>) {
    chunks.push(c);
    size += c.length;
    if (size > MAX_PASSWORD + 2) break;
  }
  return Buffer.concat(chunks).toString('utf8').split(/\r?\n/)[0];
}
