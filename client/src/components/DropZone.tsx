import { type Picked, filesFromInput } from '../drop.ts';

/** The invitation to drop files (the whole page takes them) and the buttons phones need. */
export function DropZone({ onFiles, dragging }: { onFiles: (files: Picked[]) => void; dragging: boolean }) {
  return (
    <section className={`panel dropzone${dragging ? ' active' : ''}`} aria-labelledby="drop-title" data-testid="dropzone">
      <svg className="drop-icon" viewBox="0 0 48 48" aria-hidden="true">
        <path d="M24 30V10m0 0-8 8m8-8 8 8M10 30v6a2 2 0 0 0 2 2h24a2 2 0 0 0 2-2v-6" />
      </svg>
      <h2 id="drop-title">
        <span className="if-pointer">{dragging ? 'Drop to sync' : 'Drop files or a folder anywhere on this page'}</span>
        <span className="if-touch">Choose files to sync</span>
      </h2>
      <p className="hint">They are chunked on this device; only the parts the server lacks are uploaded.</p>
      <div className="actions">
        <label className="button primary">
          Choose files
          <input type="file" multiple className="visually-hidden" data-testid="file-input" onChange={(e) => onFiles(filesFromInput(e.currentTarget))} />
        </label>
        <label className="button">
          Choose a folder
          <input
            type="file"
            className="visually-hidden"
            data-testid="folder-input"
            ref={(el) => el?.setAttribute('webkitdirectory', '')}
            onChange={(e) => onFiles(filesFromInput(e.currentTarget))}
          />
        </label>
      </div>
    </section>
  );
}
