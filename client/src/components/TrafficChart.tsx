import type { SyncReport } from '../../../shared/src/session/delta-client.ts';
import { formatBytes } from '../format.ts';

/** Dsync's traffic by protocol part, next to what sending the whole file would cost. */
export function TrafficChart({ report, fullLabel }: { report: SyncReport; fullLabel: string }) {
  const t = report.traffic;
  const scale = Math.max(report.size, t.total, 1);
  // a part that moved any bytes stays visible, however thin
  const width = (bytes: number) => (bytes > 0 ? `max(3px, ${(100 * bytes) / scale}%)` : '0');
  const parts = [
    { key: 'checksums', label: 'Checksum List', bytes: t.checksumList },
    { key: 'tokens', label: 'Match Tokens', bytes: t.matchTokens },
    { key: 'basis', label: 'Basis Checksums', bytes: t.basisChecksums },
    { key: 'delta', label: 'Delta Bytes', bytes: t.delta },
  ];
  const described = `${parts.map((p) => `${p.label} ${formatBytes(p.bytes)}`).join(', ')}; ${fullLabel.toLowerCase()} ${formatBytes(report.size)}`;
  return (
    <figure className="chart" role="img" aria-label={`Traffic: ${described}`}>
      <div className="chart-row">
        <span className="chart-label">Dsync</span>
        <span className="chart-track">
          {parts.map((p) => (
            <span key={p.key} className={`seg ${p.key}`} style={{ width: width(p.bytes) }} />
          ))}
        </span>
        <span className="chart-value">{formatBytes(t.total)}</span>
      </div>
      <div className="chart-row">
        <span className="chart-label">{fullLabel}</span>
        <span className="chart-track">
          <span className="seg full" style={{ width: width(report.size) }} />
        </span>
        <span className="chart-value">{formatBytes(report.size)}</span>
      </div>
      <figcaption className="legend" aria-hidden="true">
        {parts.map((p) => (
          <span key={p.key}>
            <span className={`key ${p.key}`} />
            {p.label} {formatBytes(p.bytes)}
          </span>
        ))}
      </figcaption>
    </figure>
  );
}
