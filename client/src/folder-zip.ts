/**
 * A folder from the server as one zip, made in the page: client-zip (2.6 kB gzipped, streams,
 * Zip64) reads each file's verified download (GET /api/download) as the archive reaches it,
 * one at a time (each waiting for a busy server, shared/src/transport/busy.ts), and stores its bytes as they are (no compression: the page never holds more
 * than what the browser buffers of the archive Blob). Chosen over fflate's Zip, which is as
 * fast (both are bound by CRC-32: 52–122 MB/s in Node on this machine) but takes bytes pushed
 * in callbacks rather than a fetch Response.
 */
import { downloadZip } from 'client-zip';
import { fetchWhileBusy } from '../../shared/src/transport/busy.ts';
import { api } from './api.ts';

/** The zip of everything under `path` (ending in '/'): each file by its path in the folder,
 *  each folder (empty ones too) as a folder entry. */
export async function folderZip(path: string): Promise<Blob> {
  const { files, folders } = await api.tree(path);
  const rel = (n: string) => n.slice(path.length);
  async function* entries() {
    for (const f of folders) yield { name: rel(f), lastModified: new Date() };
    for (const f of files) {
      const res = await fetchWhileBusy(() => fetch(api.downloadUrl(f.name, f.latest)));
      if (!res.ok) throw new Error(`${f.name}: HTTP ${res.status}`);
      yield { name: rel(f.name), input: res, lastModified: new Date(f.mtime), size: f.size };
    }
  }
  return downloadZip(entries()).blob();
}

/** Saves the zip of `path` as "<folder name>.zip" through the browser's downloads. */
export async function downloadFolder(path: string): Promise<void> {
  const blob = await folderZip(path);
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = `${path.slice(0, -1).split('/').pop()}.zip`;
  a.click();
  setTimeout(() => URL.revokeObjectURL(a.href), 60_000);
}
