import { useState } from 'react';
import { api } from '../api.ts';

/** The sign-in form of a server with accounts (`dsync serve --users`). */
export function Login({ onDone }: { onDone: () => void }) {
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);
  return (
    <section className="panel login" aria-labelledby="login-title">
      <h2 id="login-title">Sign in to this server</h2>
      <form
        onSubmit={async (e) => {
          e.preventDefault();
          const f = new FormData(e.currentTarget);
          setBusy(true);
          try {
            await api.login(String(f.get('name')), String(f.get('password')));
            setError('');
            onDone();
          } catch (err) {
            setError((err as Error).message);
          } finally {
            setBusy(false);
          }
        }}
      >
        <label>
          Name
          <input name="name" autoComplete="username" required />
        </label>
        <label>
          Password
          <input name="password" type="password" autoComplete="current-password" required />
        </label>
        <button className="button primary" disabled={busy}>
          Sign in
        </button>
      </form>
      {error && (
        <p className="form-error" role="alert">
          {error}
        </p>
      )}
    </section>
  );
}
