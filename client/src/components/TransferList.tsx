import type { Transfer, Transfers } from '../transfers.ts';
import { TransferCard } from './TransferCard.tsx';

/** The transfers of this visit, newest first. */
export function TransferList({ list, transfers, maxFileSize }: { list: readonly Transfer[]; transfers: Transfers; maxFileSize: number }) {
  if (!list.length) return null;
  const running = list.filter((t) => t.status === 'running' || t.status === 'queued').length;
  const finished = list.some((t) => t.status === 'done');
  return (
    <section className="panel" aria-labelledby="transfers-title">
      <div className="section-head">
        <h2 id="transfers-title">
          This visit{running > 0 && <span className="count"> · {running} in progress</span>}
        </h2>
        {finished && (
          <button className="button small quiet" onClick={() => transfers.clearDone()}>
            Clear finished
          </button>
        )}
      </div>
      <ul className="cards">
        {list.map((t) => (
          <TransferCard key={t.id} t={t} maxFileSize={maxFileSize} onRetry={() => transfers.retry(t.id)} onCancel={() => transfers.cancel(t.id)} />
        ))}
      </ul>
    </section>
  );
}
