import type { SyncReport } from '../../../shared/src/sync-client.ts';
import { formatBytes, formatDuration, savedPercent } from '../format.ts';
import { problem, progress, statusLine, steps } from '../messages.ts';
import type { Transfer } from '../transfers.ts';
import { TrafficChart } from './TrafficChart.tsx';

interface Props {
  t: Transfer;
  maxFileSize: number;
  onRetry: () => void;
  onCancel: () => void;
}

/** One upload or download: its steps while it runs, then its result or what went wrong. */
export function TransferCard({ t, maxFileSize, onRetry, onCancel }: Props) {
  const active = t.status === 'queued' || t.status === 'running';
  return (
    <li className={`card ${t.status}`} data-testid="transfer" data-name={t.name} data-direction={t.direction} data-status={t.status} data-step={t.step ?? ''}>
      <div className="card-head">
        <span className={`direction ${t.direction}`} title={t.direction === 'up' ? 'Upload' : 'Download'}>
          <span aria-hidden="true">{t.direction === 'up' ? '↑' : '↓'}</span>
          <span className="visually-hidden">{t.direction === 'up' ? 'Upload' : 'Download'}</span>
        </span>
        <span className="name">
          {t.name}
          {t.version !== undefined && <span className="version-tag">v{t.version}</span>}
        </span>
        <span className="size">{formatBytes(t.size)}</span>
        {active && (
          <button className="button small quiet" onClick={onCancel} aria-label={`Cancel ${t.name}`}>
            Cancel
          </button>
        )}
      </div>
      {active && <Progress t={t} />}
      {t.status === 'failed' && <Failed t={t} maxFileSize={maxFileSize} onRetry={onRetry} />}
      {t.status === 'done' && t.report && (t.direction === 'up' ? <Uploaded r={t.report} /> : <Downloaded t={t} r={t.report} />)}
    </li>
  );
}

function Progress({ t }: { t: Transfer }) {
  const line = statusLine(t);
  return (
    <div className="progress">
      <div className="steps" role="progressbar" aria-label={`${t.name}: progress`} aria-valuemin={0} aria-valuemax={100} aria-valuenow={Math.round(100 * progress(t))} aria-valuetext={line}>
        {steps(t).map((s) => (
          <div key={s.label} className={`step ${s.state}`}>
            <span className="track">
              <span className={`fill${s.fill === null ? ' busy' : ''}`} style={s.fill === null ? undefined : { transform: `scaleX(${s.fill})` }} />
            </span>
            <span className="step-label">{s.label}</span>
          </div>
        ))}
      </div>
      <p className="status-line" data-testid="status-line">
        {line}
      </p>
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

function Timing({ r }: { r: SyncReport }) {
  return (
    <details className="details">
      <summary>Details</summary>
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
            <dd>one: matched against version {r.knownVersion}, which this page synced before</dd>
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

function Uploaded({ r }: { r: SyncReport }) {
  const sent = r.traffic.total;
  return (
    <div className="result" data-testid="result" data-version={r.version} data-sent={sent} data-delta={r.traffic.delta} data-size={r.size} data-report={JSON.stringify(r)}>
      <p className="summary">
        {r.matchedBytes > 0 ? (
          <>
            <strong>{formatBytes(sent)}</strong> sent for {formatBytes(r.size)} · <strong className="saved">{savedPercent(sent, r.size)} saved</strong>
          </>
        ) : (
          <>
            <strong>{formatBytes(sent)}</strong> sent · new content, nothing to reuse
          </>
        )}{' '}
        · {formatDuration(r.timeMs.total)} · version {r.version}
      </p>
      <TrafficChart report={r} fullLabel="Full upload" />
      <Timing r={r} />
    </div>
  );
}

function Downloaded({ t, r }: { t: Transfer; r: SyncReport }) {
  const moved = r.traffic.total;
  return (
    <div className="result" data-testid="result" data-version={r.version} data-sent={moved} data-delta={r.traffic.delta} data-size={r.size}>
      <p className="summary">
        <strong>{formatBytes(moved)}</strong> transferred to rebuild {formatBytes(r.size)} from {t.basisName} · <strong className="saved">{savedPercent(moved, r.size)} saved</strong> ·{' '}
        {formatDuration(r.timeMs.total)}
      </p>
      <TrafficChart report={r} fullLabel="Full download" />
      {t.blobUrl && (
        <a className="button small" href={t.blobUrl} download={t.name.split('/').pop()} data-testid="save">
          Save again
        </a>
      )}
    </div>
  );
}
