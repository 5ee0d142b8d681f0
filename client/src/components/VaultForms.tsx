/** The Vaults view's forms (VaultsPanel.tsx): a new passphrase typed twice, and an unlock by
 *  passphrase or recovery key. */
import { type FormEvent, useState } from 'react';

/** A new passphrase typed twice (New vault, Change passphrase): fields `passphrase`, `again`. */
export function PassphraseForm({ testId, action, busy, onSubmit, onCancel }: { testId: string; action: string; busy: boolean; onSubmit: (e: FormEvent<HTMLFormElement>) => void; onCancel: () => void }) {
  return (
    <form className="vault-form" onSubmit={onSubmit} data-testid={testId}>
      <label>
        {action === 'Create' ? 'Passphrase' : 'New passphrase'}
        <input name="passphrase" type="password" autoComplete="new-password" required minLength={1} autoFocus />
      </label>
      <label>
        {action === 'Create' ? 'Passphrase again' : 'New passphrase again'}
        <input name="again" type="password" autoComplete="new-password" required />
      </label>
      <FormActions action={action} busy={busy} onCancel={onCancel} />
    </form>
  );
}

export function UnlockForm({ busy, onSubmit, onCancel }: { busy: boolean; onSubmit: (e: FormEvent<HTMLFormElement>) => void; onCancel: () => void }) {
  const [how, setHow] = useState<'passphrase' | 'recovery'>('passphrase');
  return (
    <form className="vault-form" onSubmit={onSubmit} data-testid="vault-unlock">
      <fieldset className="vault-how">
        <legend className="visually-hidden">Unlock with</legend>
        <label>
          <input type="radio" name="how" value="passphrase" checked={how === 'passphrase'} onChange={() => setHow('passphrase')} /> Passphrase
        </label>
        <label>
          <input type="radio" name="how" value="recovery" checked={how === 'recovery'} onChange={() => setHow('recovery')} /> Recovery key
        </label>
      </fieldset>
      <label>
        {how === 'passphrase' ? 'Passphrase' : 'Recovery key'}
        <input name="secret" type={how === 'passphrase' ? 'password' : 'text'} autoComplete={how === 'passphrase' ? 'current-password' : 'off'} spellCheck={false} required autoFocus />
      </label>
      <FormActions action="Unlock" busy={busy} onCancel={onCancel} />
    </form>
  );
}

/** A vault form's buttons: its action, and Cancel. */
function FormActions({ action, busy, onCancel }: { action: string; busy: boolean; onCancel: () => void }) {
  return (
    <div className="vault-form-actions">
      <button className="button primary" disabled={busy}>
        {action}
      </button>
      <button type="button" className="button" onClick={onCancel} disabled={busy}>
        Cancel
      </button>
    </div>
  );
}
