import { useEffect, useId, useRef, useState } from 'react';

/** What a dialog asks for: a confirmation, or a new name. */
export type Ask =
  | { kind: 'confirm'; title: string; body: string; action: string; danger?: boolean; run: () => Promise<unknown> }
  | { kind: 'rename'; title: string; label: string; value: string; action: string; run: (value: string) => Promise<unknown> };

/**
 * A modal <dialog> (focus kept inside, Escape closes it) that runs its action and shows the
 * server's answer when it fails.
 */
export function AskDialog({ ask, onClose }: { ask: Ask; onClose: () => void }) {
  const ref = useRef<HTMLDialogElement>(null);
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);
  const [value, setValue] = useState(ask.kind === 'rename' ? ask.value : '');
  const title = useId();
  const input = useId();
  useEffect(() => {
    if (!ref.current!.open) ref.current!.showModal();
  }, []);
  const submit = async (e: React.FormEvent) => {
    e.preventDefault();
    setBusy(true);
    try {
      await (ask.kind === 'rename' ? ask.run(value.trim()) : ask.run());
      onClose();
    } catch (err) {
      setError((err as Error).message);
      setBusy(false);
    }
  };
  return (
    <dialog ref={ref} className="dialog" aria-labelledby={title} onClose={onClose} data-testid="dialog">
      <form onSubmit={submit}>
        <h2 id={title}>{ask.title}</h2>
        {ask.kind === 'confirm' ? (
          <p>{ask.body}</p>
        ) : (
          <label htmlFor={input}>
            {ask.label}
            <input id={input} value={value} onChange={(e) => setValue(e.currentTarget.value)} autoFocus spellCheck={false} autoCapitalize="off" required />
          </label>
        )}
        {error && (
          <p className="form-error" role="alert">
            {error}
          </p>
        )}
        <div className="dialog-actions">
          <button type="button" className="button" onClick={onClose}>
            Cancel
          </button>
          <button className={`button ${ask.kind === 'confirm' && ask.danger ? 'danger' : 'primary'}`} disabled={busy || (ask.kind === 'rename' && (!value.trim() || value.trim() === ask.value))}>
            {ask.action}
          </button>
        </div>
      </form>
    </dialog>
  );
}
