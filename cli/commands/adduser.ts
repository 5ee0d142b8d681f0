/** `dsync adduser NAME --users FILE`: adds an account and prints its token. */
import { addUser, passwordWeakness } from '../../server/src/http/auth.ts';
import { type Command, UsageError, str } from '../command.ts';
import { askHidden, stdinLine } from '../prompt.ts';

export const command: Command = {
  usage: 'adduser NAME --users FILE [--password | --password-stdin] [--force]',
  about:
    "Adds the user NAME to the users file (created if missing) and prints the new user's\n" +
    'token (the file keeps only its SHA-256). With a password the user can also sign in on the\n' +
    'page: --password asks for it (twice, not shown), --password-stdin reads the first line of\n' +
    'stdin; never on the command line, where the shell history and the process list keep it. A\n' +
    'password has at least 12 characters and is not a common one. A running server reads the\n' +
    'file again within seconds: no restart.',
  options: {
    users: { type: 'string', arg: 'FILE', help: 'the users file (required)' },
    password: { type: 'boolean', help: "ask for the user's password for the page's sign-in (none: token only)" },
    'password-stdin': { type: 'boolean', help: 'read the password from the first line of stdin' },
    force: { type: 'boolean', help: "replace an existing user's token and password" },
  },
  positionals: [1, 2],
  async run(values, [name, extra]) {
    const users = str(values, 'users');
    if (!users) throw new UsageError('--users FILE is required');
    if (extra !== undefined) {
      throw new UsageError(`unexpected argument: a password is never taken on the command line (the shell's history and the process list keep it); --password asks for it, --password-stdin reads it`);
    }
    let password: string | undefined;
    if (values['password-stdin']) password = await stdinLine();
    else if (values.password) {
      if (!process.stdin.isTTY) throw new UsageError('--password asks on a terminal; use --password-stdin to read the password from a pipe');
      password = await askHidden(`password for ${name}: `);
      if ((await askHidden('again: ')) !== password) throw new Error('the two passwords differ; nothing was changed');
    }
    if (password !== undefined) {
      const weak = passwordWeakness(password, name);
      if (weak) throw new Error(`${weak}; nothing was changed`);
    }
    console.log(addUser(users, name, password, { replace: values.force === true }));
  },
};
