/** Files from drag-and-drop (whole folders walked) and from file inputs, with their names. */
import { useEffect, useState } from 'react';

export interface Picked {
  file: File;
  /** the name to sync under: folder-relative path for files inside a dropped or picked folder */
  name: string;
  /** a dropped file's handle, where the browser gives one (unfinished.ts keeps it) */
  handle?: FileSystemFileHandle;
}

function entryFile(entry: FileSystemFileEntry): Promise<File> {
  return new Promise((resolve, reject) => entry.file(resolve, reject));
}

/** The files under `entry`; a file inside a folder that cannot be read is left out (and logged). */
async function walk(entry: FileSystemEntry, out: Picked[]): Promise<void> {
  if (entry.isFile) {
    out.push({ file: await entryFile(entry as FileSystemFileEntry), name: entry.fullPath.replace(/^\//, '') });
  } else if (entry.isDirectory) {
    const reader = (entry as FileSystemDirectoryEntry).createReader();
    for (;;) {
      // readEntries answers in batches (100 in Chromium) until it returns none
      const batch = await new Promise<FileSystemEntry[]>((resolve, reject) => reader.readEntries(resolve, reject));
      if (!batch.length) break;
      for (const e of batch) {
        if (e.isDirectory) await walk(e, out);
        else await walk(e, out).catch((err) => console.warn(`dropped file ${e.fullPath} cannot be read:`, err));
      }
    }
  }
}

/** A dropped file's handle (Chromium), as `{handle}`, or nothing. Taken before the first await. */
function handleOf(i: DataTransferItem): Promise<{ handle?: FileSystemFileHandle }> {
  const get = (i as DataTransferItem & { getAsFileSystemHandle?: () => Promise<FileSystemHandle | null> }).getAsFileSystemHandle;
  if (!get) return Promise.resolve({});
  return get.call(i).then(
    (h) => (h?.kind === 'file' ? { handle: h as FileSystemFileHandle } : {}),
    () => ({}),
  );
}

/**
 * Every file in a drop, folders included. Entries must be taken before the first await. A
 * dropped file is the item's own File (WebKit cannot read the entry of a DataTransfer a page
 * built: its `file()` rejects with NotFoundError); a folder that cannot be read gives what was
 * read of it.
 */
export async function filesFromDrop(dt: DataTransfer): Promise<Picked[]> {
  const items = Array.from(dt.items ?? []).filter((i) => i.kind === 'file');
  if (!items.length) return Array.from(dt.files, (file) => ({ file, name: file.name }));
  const taken = items.map((i) => ({ entry: i.webkitGetAsEntry?.() ?? null, file: i.getAsFile(), handle: handleOf(i) }));
  const out: Picked[] = [];
  for (const { entry, file, handle } of taken) {
    if (entry?.isFile && file) out.push({ file, name: file.name, ...(await handle) });
    else if (entry) await walk(entry, out).catch((e) => console.warn(`dropped folder ${entry.fullPath} cannot be read:`, e));
    else if (file) out.push({ file, name: file.name });
  }
  return out;
}

/** The files of an <input type=file>, which is then cleared so the same file can be picked again. */
export function filesFromInput(input: HTMLInputElement): Picked[] {
  const out = Array.from(input.files ?? [], (file) => ({ file, name: file.webkitRelativePath || file.name }));
  input.value = '';
  return out;
}

/** Makes the whole window a drop target; returns whether files are being dragged over it. */
export function useWindowDrop(onFiles: (files: Picked[]) => void): boolean {
  const [dragging, setDragging] = useState(false);
  useEffect(() => {
    let depth = 0;
    const hasFiles = (e: DragEvent) => !!e.dataTransfer?.types.includes('Files');
    const enter = (e: DragEvent) => {
      if (!hasFiles(e)) return;
      e.preventDefault();
      depth++;
      setDragging(true);
    };
    const over = (e: DragEvent) => {
      if (!hasFiles(e)) return;
      e.preventDefault();
      e.dataTransfer!.dropEffect = 'copy';
    };
    const leave = () => {
      depth = Math.max(0, depth - 1);
      if (!depth) setDragging(false);
    };
    const drop = (e: DragEvent) => {
      if (!e.dataTransfer) return;
      e.preventDefault();
      depth = 0;
      setDragging(false);
      filesFromDrop(e.dataTransfer).then(
        (files) => files.length && onFiles(files),
        (err) => console.warn('the drop cannot be read:', err),
      );
    };
    window.addEventListener('dragenter', enter);
    window.addEventListener('dragover', over);
    window.addEventListener('dragleave', leave);
    window.addEventListener('drop', drop);
    return () => {
      window.removeEventListener('dragenter', enter);
      window.removeEventListener('dragover', over);
      window.removeEventListener('dragleave', leave);
      window.removeEventListener('drop', drop);
    };
  }, [onFiles]);
  return dragging;
}
