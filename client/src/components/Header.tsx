import type { ServerState } from '../api.ts';

export function Header({ server, onRetry, onSignOut }: { server: ServerState; onRetry: () => void; onSignOut: () => void }) {
  return (
    <header className="top">
      <div className="brand">
        <svg className="logo" viewBox="0 0 32 32" aria-hidden="true">
          <rect width="32" height="32" rx="8" />
          <path d="M9 12h13l-4-4M23 20H10l4 4" />
        </svg>
        <div>
          <h1>Dsync</h1>
          <p className="tagline">Sync files to your server, sending only what changed.</p>
        </div>
      </div>
      <div className="server">
        <span role="status" data-testid="server-status">
          <ServerBadge server={server} />
        </span>
        {server.status === 'unreachable' && (
          <button className="button small" onClick={onRetry}>
            Try again
          </button>
        )}
        {server.status === 'ok' && !server.singleUser && (
          <button className="button small" onClick={onSignOut}>
            Sign out
          </button>
        )}
      </div>
    </header>
  );
}

function ServerBadge({ server }: { server: ServerState }) {
  switch (server.status) {
    case 'checking':
      return <span className="badge">Connecting…</span>;
    case 'unreachable':
      return <span className="badge bad">Server unreachable · reconnecting</span>;
    case 'signin':
      return <span className="badge warn">Sign-in required</span>;
    case 'ok':
      return <span className="badge ok">{server.singleUser ? `Connected to ${location.host}` : `Signed in as ${server.user}`}</span>;
  }
}
