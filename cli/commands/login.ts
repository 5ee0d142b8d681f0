/**
 * `dsync login -s URL [--token T]` and `dsync logout -s URL`: the token of a server kept in a
 * file only the user can read (as gh and rclone keep theirs), so that it need not be typed on
 * every command line, where the process list shows it. The file is
 * $XDG_CONFIG_HOME/dsync/tokens.json (else ~/.config/dsync/tokens.json), mode 0600 in a folder
 * of mode 0700, one token per server (its http://host:port); commands use it when neither
 * --token nor DSYNC_TOKEN is given (cli/remote.ts tokenOf).
 */
import { randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { type Command, EXIT_FAILED, EXIT_OK, UsageError, type Values, str } from '../command.ts';
import { askHidden, stdinLine } from '../prompt.ts';
import { ApiError, SERVER_OPTS, api, checkTls, httpBase, storedTokens, tokensFile } from '../remote.ts';

/** Writes the tokens: a file of mode 0600, in place by a rename (never half-written). */
async function saveTokens(tokens: Record<string, string>) {
  const file = tokensFile();
  await fs.mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
  const tmp = `${file}.${process.pid}-${randomBytes(4).toString('hex')}`;
  await fs.writeFile(tmp, JSON.stringify(tokens, null, 2) + '\n', { mode: 0o600, flag: 'wx' });
  try {
    await fs.chmod(tmp, 0o600); // whatever the umask did
    await fs.rename(tmp, file);
  } catch (e) {
    await fs.rm(tmp, { force: true });
    throw e;
  }
}

export const login: Command = {
  usage: 'login --server URL [--token T]',
  about: `Stores the token for a server, so that commands to it need neither --token nor
DSYNC_TOKEN (which stay first when given). Without --token the token is read from stdin
(echo "$TOKEN" | dsync login -s URL, or typed at a prompt that does not echo it), so it never shows in the
process list. The server is asked once with it; a token it refuses is not stored.
The file is $XDG_CONFIG_HOME/dsync/tokens.json (else ~/.config/dsync/tokens.json), readable
only by you (mode 0600). dsync logout -s URL removes it.
Exit status: 0 stored, 1 refused or failed, 2 a wrong command line.`,
  options: SERVER_OPTS,
  positionals: [0, 0],
  async run(values: Values) {
    const server = httpBase(values);
    const token = (str(values, 'token') ?? (process.stdin.isTTY ? await askHidden('token: ', 'token') : await stdinLine())).trim();
    if (!token) throw new UsageError('no token given (--token T, or on stdin)');
    if (/\s/.test(token)) throw new UsageError('a token has no spaces');
    // the token read from stdin goes as DSYNC_TOKEN would (not as --token, which is warned about)
    if (str(values, 'token') === undefined) process.env.DSYNC_TOKEN = token;
    checkTls(values);
    try {
      await api(values, 'GET', `/api/files?${new URLSearchParams({ prefix: '', limit: '1' })}`);
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) {
        console.error(`dsync login: ${server} refused this token: it is mistyped, or the account or its token is gone`);
        return EXIT_FAILED;
      }
      throw e;
    }
    await saveTokens({ ...storedTokens(), [server]: token });
    console.error(`dsync login: the token for ${server} is stored in ${tokensFile()}`);
    return EXIT_OK;
  },
};

export const logout: Command = {
  usage: 'logout --server URL',
  about: `Removes the token dsync login stored for the server.
Exit status: 0 removed (or none was stored), 2 a wrong command line.`,
  options: { server: SERVER_OPTS.server },
  positionals: [0, 0],
  async run(values: Values) {
    const server = httpBase(values);
    const tokens = storedTokens();
    if (!(server in tokens)) {
      console.error(`dsync logout: no token stored for ${server}`);
      return EXIT_OK;
    }
    delete tokens[server];
    await saveTokens(tokens);
    console.error(`dsync logout: the token for ${server} is removed from ${tokensFile()}`);
    return EXIT_OK;
  },
};

export const command = login;
