/** `dsync adduser NAME --users FILE`: adds an account and prints its token. */
import { addUser } from '../../server/src/auth.ts';
import { type Command, UsageError, str } from '../command.ts';

export const command: Command = {
  usage: 'adduser NAME --users FILE [--password PASSWORD]',
  about: "Adds the user NAME to the users file (created if missing) and prints the new user's\ntoken (the file keeps only its SHA-256). Then run `dsync serve --users FILE`.",
  options: {
    users: { type: 'string', arg: 'FILE', help: 'the users file (required)' },
    password: { type: 'string', arg: 'PASSWORD', help: "the user's password for the page's sign-in (none: token only)" },
  },
  positionals: [1, 1],
  async run(values, [name]) {
    const users = str(values, 'users');
    if (!users) throw new UsageError('--users FILE is required');
    console.log(addUser(users, name, str(values, 'password')));
  },
};
