// The folder the folder-sync specs pick: Playwright cannot drive the native folder picker, so
// the page is handed a folder of its own storage (OPFS `proj`: the same kind of
// FileSystemDirectoryHandle), which the test writes and reads as a user's folder.
import type { Page } from '@playwright/test';

/** The picked folder: OPFS `proj`. */
export async function stubPicker(page: Page) {
  await page.addInitScript(() => {
    (window as unknown as { showDirectoryPicker: () => Promise<FileSystemDirectoryHandle> }).showDirectoryPicker = async () => (await navigator.storage.getDirectory()).getDirectoryHandle('proj', { create: true });
  });
}

/** Writes (text) or deletes (null) `p` in the page's picked folder. */
export async function put(page: Page, p: string, text: string | null) {
  await page.evaluate(
    async ([p, text]) => {
      let d = await (await navigator.storage.getDirectory()).getDirectoryHandle('proj', { create: true });
      const parts = p!.split('/');
      const name = parts.pop()!;
      for (const c of parts) d = await d.getDirectoryHandle(c, { create: true });
      if (text === null) return d.removeEntry(name);
      const w = await (await d.getFileHandle(name, { create: true })).createWritable();
      await w.write(text);
      await w.close();
    },
    [p, text],
  );
}

/** The picked folder's files and their text (read while the page's sync may be writing: a
 *  listing that meets an entry removed meanwhile, or a file replaced between its snapshot and
 *  the read of its bytes, is read again). */
export async function tree(page: Page): Promise<Record<string, string>> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await readTree(page);
    } catch (e) {
      if (attempt >= 20 || !/NotFoundError|NotReadableError/.test(String(e))) throw e;
      await page.waitForTimeout(100);
    }
  }
}

function readTree(page: Page): Promise<Record<string, string>> {
  return page.evaluate(async () => {
    const out: Record<string, string> = {};
    const walk = async (d: FileSystemDirectoryHandle, rel: string) => {
      for await (const e of (d as unknown as { values(): AsyncIterable<FileSystemFileHandle | FileSystemDirectoryHandle> }).values()) {
        if (e.kind === 'directory') await walk(e, rel + e.name + '/');
        // (a download's temporary file, moved into place while this reads, is not listed, nor
        // a file deleted while this reads)
        else if (!e.name.includes('.dsync-tmp-')) {
          const text = await e.getFile().then((f) => f.text(), () => null);
          if (text !== null) out[rel + e.name] = text;
        }
      }
    };
    const top = await navigator.storage.getDirectory();
    await walk(await top.getDirectoryHandle('proj', { create: true }), '');
    return out;
  });
}
