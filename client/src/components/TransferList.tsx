import { useState } from 'react';
import { batchLine } from '../transfer-text.ts';
import { type Transfer, type Transfers, cardOrder, retriable } from '../transfers.ts';
import { TransferCard } from './TransferCard.tsx';

/** Cards shown before "Show all": a batch of hundreds stays a short page. */
const CARDS = 8;

/** The transfers of this visit under a summary of the whole batch (cardOrder). */
export function TransferList({ list, transfers, maxFileSize }: { list: readonly Transfer[]; transfers: Transfers; maxFileSize: number }) {
  const [all, setAll] = useState(false);
  if (!list.length) return null;
  const running = list.filter((t) => t.status === 'running' || t.status === 'queued').length;
  const ordered = cardOrder(list);
  const shown = all ? ordered : ordered.slice(0, CARDS);
  return (
    <section className="panel" aria-labelledby="transfers-title">
      <div className="section-head">
        <h2 id="transfers-title">
          This visit{running > 0 && <span className="count"> · {running} in progress</span>}
        </h2>
      </div>
      <Batch list={list} transfers={transfers} />
      <ul className="cards">
        {shown.map((t) => (
          <TransferCard
            key={t.id}
            t={t}
            maxFileSize={maxFileSize}
            online={transfers.online}
            signedIn={transfers.signedIn}
            onRetry={() => transfers.retry(t.id)}
            onCancel={() => transfers.cancel(t.id)}
            onDismiss={() => transfers.dismiss(t.id)}
          />
        ))}
      </ul>
      {ordered.length > shown.length && (
        <button className="button small quiet more" onClick={() => setAll(true)}>
          Show all {ordered.length}
        </button>
      )}
    </section>
  );
}

/** The summary over the cards, with retry-all and dismiss. */
function Batch({ list, transfers }: { list: readonly Transfer[]; transfers: Transfers }) {
  if (list.length < 2) return null;
  const b = batchLine(list, transfers.online);
  const canRetry = list.some((t) => t.status === 'failed' && retriable(t));
  return (
    <div className="batch" data-testid="batch">
      <div className="bar" role="progressbar" aria-label="All transfers" aria-valuemin={0} aria-valuemax={100} aria-valuenow={Math.floor(100 * b.fraction)} aria-valuetext={b.line}>
        <span className="fill" style={{ transform: `scaleX(${b.fraction})` }} />
      </div>
      <div className="batch-row">
        <p className="status-line" data-testid="batch-line">
          {b.line}
        </p>
        <span className="batch-actions">
          {b.settled < list.length && (
            <button className="button small quiet" onClick={() => transfers.cancelAll()}>
              Cancel all
            </button>
          )}
          {canRetry && (
            <button className="button small" onClick={() => transfers.retryAll()}>
              Retry all
            </button>
          )}
          {b.settled > 0 && (
            <button className="button small quiet" onClick={() => transfers.dismiss()}>
              Dismiss finished
            </button>
          )}
        </span>
      </div>
    </div>
  );
}
