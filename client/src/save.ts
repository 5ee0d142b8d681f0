/** Hands a downloaded file (a blob: URL) to the browser's download manager. */
export function save(url: string, name: string) {
  const a = document.createElement('a');
  a.href = url;
  a.download = name.split('/').pop()!;
  a.click();
}
