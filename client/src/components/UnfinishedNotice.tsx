import { useEffect, useState } from 'react';
import type { Picked } from '../drop.ts';
import { formatBytes } from '../format.ts';
import { type Unfinished, fileOf, forgetAll, forgetUpload, unfinishedUploads } from '../unfinished.ts';

/** Names listed before "and N more". */
const LISTED = 5;

/** On load: the uploads that did not finish when this page was last closed or reloaded, with
 *  Finish for those whose file handle was kept (unfinished.ts), and Forget. */
export function UnfinishedNotice({ scope, onFiles, active }: { scope: string; onFiles: (files: Picked[]) => void; active: (name: string) => boolean }) {
  const [left, setLeft] = useState<Unfinished[] | null>(null);
  const [note, setNote] = useState('');
  useEffect(() => {
    let live = true;
    // uploads of this visit (queued while signed out, say) are not left over from the last
    void unfinishedUploads(scope).then((u) => live && setLeft(u.filter((x) => !active(x.name))));
    return () => void (live = false);
  }, [scope]);
  if (!left?.length) return null;
  const withHandle = left.filter((u) => u.handle);
  const finish = async () => {
    const picked: Picked[] = [];
    const lost: string[] = [];
    for (const u of withHandle) {
      const file = await fileOf(u);
      if (file) picked.push({ file, name: u.name });
      else lost.push(u.name);
    }
    if (picked.length) onFiles(picked);
    const rest = left.filter((u) => !picked.some((p) => p.name === u.name));
    for (const u of left) if (!rest.includes(u)) forgetUpload(scope, u.name);
    setLeft(rest);
    setNote(lost.length ? `${lost.length} could not be opened again (moved, deleted or access refused): drop them again.` : '');
  };
  const forget = () => void forgetAll(scope).then(() => setLeft([]));
  return (
    <section className="panel unfinished" role="status" aria-labelledby="unfinished-title" data-testid="unfinished">
      <h2 id="unfinished-title">
        {left.length === 1 ? '1 upload' : `${left.length.toLocaleString()} uploads`} did not finish when this page was last closed or reloaded
      </h2>
      <ul className="unfinished-names">
        {left.slice(0, LISTED).map((u) => (
          <li key={u.name}>
            {u.name} <span className="muted">({formatBytes(u.size)})</span>
          </li>
        ))}
        {left.length > LISTED && <li className="muted">and {(left.length - LISTED).toLocaleString()} more</li>}
      </ul>
      <p className="hint">
        {withHandle.length === left.length
          ? 'This browser kept access to them: Finish uploads them again, sending only what the server lacks.'
          : withHandle.length
            ? `This browser kept access to ${withHandle.length} of them (Finish uploads those); drop or choose the others again.`
            : 'Drop or choose them again to finish: only what the server lacks is sent.'}
      </p>
      {note && <p className="form-error">{note}</p>}
      <div className="actions">
        {withHandle.length > 0 && (
          <button className="button small primary" onClick={() => void finish()}>
            Finish {withHandle.length === 1 ? 'it' : `these ${withHandle.length}`}
          </button>
        )}
        <button className="button small quiet" onClick={forget}>
          Forget
        </button>
      </div>
    </section>
  );
}
