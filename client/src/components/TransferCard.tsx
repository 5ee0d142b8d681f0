import type { SyncReport } from '../../../shared/src/session/delta-client.ts';
import { formatBytes, formatDuration, savedPercent } from '../format.ts';
import { guardLine, problem, progressLine, statusLine, steps } from '../transfer-text.ts';
import { type Transfer, progress } from '../transfers.ts';
import type { Threads } from '../worker-api.ts';
import { TrafficChart } from './TrafficChart.tsx';

interface Props {
  t: Transfer;
  maxFileSize: number;
  /** the server answers (queued transfers wait for it otherwise) */
  online: boolean;
  /** the server has us signed in (queued transfers wait for it otherwise) */
  signedIn?: boolean;
  onRetry: () => void;
  onCancel: () => void;
  onDismiss: () => void;
}

/** One upload or download: one line of progress while it runs, then its result or what went
 *  wrong; the protocol's steps and traffic are under Details. */
export function TransferCard({ t, maxFileSize, online, signedIn = true, onRetry, onCancel, onDismiss }: Props) {
  const active = t.status === 'queued' || t.status === 'running';
  return (
    <li className={`card ${t.status}`} data-testid="transfer" data-name={t.name} data-direction={t.direction} data-status={t.status} data-step={t.step ?? ''}>
      <div className="card-head">
        <span className={`direction ${t.direction}`} title={t.direction === 'up' ? 'Upload' : 'Download'}>
          <span aria-hidden="true">{t.direction === 'up' ? '↑' : '↓'}</span>
          <span className="visually-hidden">{t.direction === 'up' ? 'Upload' : 'Download'}</span>
        </span>
        <span className="name">
          <PathName name={t.name} />
          {t.version !== undefined && <span className="version-tag">v{t.version}</span>}
        </span>
        <span className="size">{formatBytes(t.size)}</span>
        {active ? (
          <button className="button small quiet" onClick={onCancel} aria-label={`Cancel ${t.name}`}>
            Cancel
          </button>
        ) : (
          <button className="button small quiet icon" onClick={onDismiss} aria-label={`Dismiss ${t.name}`} title="Dismiss">
            <span aria-hidden="true">×</span>
          </button>
        )}
      </div>
      {active && <Progress t={t} online={online} signedIn={signedIn} />}
      {t.status === 'failed' && <Failed t={t} maxFileSize={maxFileSize} onRetry={onRetry} />}
      {t.status === 'done' && t.guard && (
        <p className={`guard ${t.guard.kind}`} data-testid="guard" data-kind={t.guard.kind} data-saved-as={t.guard.savedAs} role="status">
          {guardLine(t.guard, t.name)}
        </p>
      )}
      {t.status === 'done' && t.report && (t.direction === 'up' ? <Uploaded r={t.report} threads={t.threads} /> : <Downloaded t={t} r={t.report} />)}
    </li>
  );
}

function Progress({ t, online, signedIn }: { t: Transfer; online: boolean; signedIn: boolean }) {
  const line = progressLine(t, online, signedIn);
  return (
    <div className="progress">
      <div className="bar" role="progressbar" aria-label={`${t.name}: progress`} aria-valuemin={0} aria-valuemax={100} aria-valuenow={Math.floor(100 * progress(t))} aria-valuetext={line}>
        <span className="fill" style={{ transform: `scaleX(${progress(t)})` }} />
      </div>
      <p className="status-line" data-testid="status-line">
        {line}
      </p>
      {t.status === 'running' && (
        <details className="details">
          <summary>Details</summary>
          <div className="steps">
            {steps(t).map((s) => (
              <div key={s.label} className={`step ${s.state}`}>
                <span className="track">
                  <span className={`fill${s.fill === null ? ' busy' : ''}`} style={s.fill === null ? undefined : { transform: `scaleX(${s.fill})` }} />
                </span>
                <span className="step-label">{s.label}</span>
              </div>
            ))}
          </div>
          <p className="hint" data-testid="step-line">
            {statusLine(t)}
          </p>
        </details>
      )}
    </div>
  );
}

function Failed({ t, maxFileSize, onRetry }: { t: Transfer; maxFileSize: number; onRetry: () => void }) {
  const p = problem(t, maxFileSize);
  return (
    <div className={`problem ${t.failure!.kind}`} role="alert" data-testid="problem" data-kind={t.failure!.kind}>
      <div>
        <p className="problem-title">{p.title}</p>
        {p.detail && <p className="problem-detail">{p.detail}</p>}
      </div>
      {p.retry && (
        <button className="button small" onClick={onRetry}>
          Retry
        </button>
      )}
    </div>
  );
}

function Details({ r, fullLabel, threads }: { r: SyncReport; fullLabel: string; threads?: Threads }) {
  return (
    <details className="details">
      <summary>Details</summary>
      <TrafficChart report={r} fullLabel={fullLabel} />
      <dl>
        <dt>Chunks</dt>
        <dd>
          {r.chunks.toLocaleString()} ({formatBytes(r.matchedBytes)} reused, {formatBytes(r.literalBytes)} sent as Delta Bytes)
        </dd>
        <dt>Time</dt>
        <dd>
          this device {formatDuration(r.timeMs.client)}
          {r.timeMs.server > 0 && <>, server {formatDuration(r.timeMs.server)}</>}, network {formatDuration(r.timeMs.network)}
        </dd>
        {r.knownVersion !== undefined && (
          <>
            <dt>Round trips</dt>
            <dd>
              one: matched against version {r.knownVersion}, which this page synced before{r.keptBasis && ', byte by byte against its copy kept on this device'}
            </dd>
          </>
        )}
        {threads && (
          <>
            <dt>Threads</dt>
            <dd data-testid="threads" data-socket-worker={threads.socketWorker} data-hash-workers={threads.hashWorkers}>
              {threadsLine(threads)}
            </dd>
          </>
        )}
        {r.traffic.wire > 0 && (
          <>
            <dt>On the wire</dt>
            <dd>{formatBytes(r.traffic.wire)} after compression</dd>
          </>
        )}
      </dl>
    </details>
  );
}

/** Where a transfer's sockets and hashing ran, as Details says it. */
function threadsLine(t: Threads): string {
  const sockets = t.socketWorker ? 'socket in a worker of its own' : 'socket in the sync worker';
  const hashing = t.hashWorkers ? `hashed by ${t.hashWorkers} hash worker${t.hashWorkers > 1 ? 's' : ''}` : 'hashed in the sync worker';
  return `${sockets}, ${hashing}`;
}

/** "· 99.8% saved" in the accent colour, or plainly that it saved nothing. */
function Saved({ moved, size, full }: { moved: number; size: number; full: string }) {
  const saved = savedPercent(moved, size);
  if (saved) return <strong className="saved">{saved} saved</strong>;
  return <span className="nothing-saved">nothing saved{moved > size ? `: ${formatBytes(moved - size)} more than a ${full}` : ''}</span>;
}

function Uploaded({ r, threads }: { r: SyncReport; threads?: Threads }) {
  const sent = r.traffic.total;
  return (
    <div className="result" data-testid="result" data-version={r.version} data-sent={sent} data-delta={r.traffic.delta} data-size={r.size} data-report={JSON.stringify(r)}>
      <p className="summary">
        {r.unchanged ? (
          <>
            <strong>Unchanged</strong> · the server has this content as version {r.version}, nothing stored
          </>
        ) : r.matchedBytes > 0 ? (
          <>
            <strong>{formatBytes(sent)}</strong> sent for {formatBytes(r.size)} · <Saved moved={sent} size={r.size} full="full upload" />
          </>
        ) : (
          <>
            <strong>{formatBytes(sent)}</strong> sent · new content, nothing to reuse
          </>
        )}{' '}
        · {formatDuration(r.timeMs.total)}
        {!r.unchanged && <> · version {r.version}</>}
      </p>
      <Details r={r} fullLabel="Full upload" threads={threads} />
    </div>
  );
}

function Downloaded({ t, r }: { t: Transfer; r: SyncReport }) {
  const moved = r.traffic.total;
  return (
    <div className="result" data-testid="result" data-version={r.version} data-sent={moved} data-delta={r.traffic.delta} data-size={r.size}>
      <p className="summary">
        <strong>{formatBytes(moved)}</strong> transferred to rebuild {formatBytes(r.size)} from {t.basisName} · <Saved moved={moved} size={r.size} full="full download" /> ·{' '}
        {formatDuration(r.timeMs.total)}
      </p>
      <Details r={r} fullLabel="Full download" threads={t.threads} />
      {t.blobUrl && (
        <a className="button small" href={t.blobUrl} download={t.name.split('/').pop()} data-testid="save">
          Save again
        </a>
      )}
    </div>
  );
}

/** A folder-relative name, its folders muted, a line break allowed after each '/'. */
function PathName({ name }: { name: string }) {
  const cut = name.lastIndexOf('/') + 1;
  if (!cut) return <>{name}</>;
  return (
    <>
      <span className="dir">
        {name
          .slice(0, cut)
          .split('/')
          .slice(0, -1)
          .map((part, i) => (
            <span key={i}>
              {part}/<wbr />
            </span>
          ))}
      </span>
      {name.slice(cut)}
    </>
  );
}
