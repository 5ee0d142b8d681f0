/** The server as the page sees it: reachable or not, signed in or not, its limits and files. */
import { useCallback, useEffect, useState } from 'react';
import { type FileInfo, type ServerState, api, probe } from './api.ts';

/** While the server cannot be reached, it is looked at again this often. */
const RECHECK_MS = 5000;

export function useServer() {
  const [state, setState] = useState<ServerState>({ status: 'checking' });
  const [files, setFiles] = useState<FileInfo[] | null>(null);

  const refresh = useCallback(async (): Promise<ServerState> => {
    const s = await probe();
    setState(s);
    if (s.status === 'ok') setFiles(await api.files().catch(() => null));
    else if (s.status === 'signin') setFiles(null);
    return s;
  }, []);

  useEffect(() => {
    void refresh();
  }, [refresh]);
  useEffect(() => {
    if (state.status !== 'unreachable') return;
    const timer = setInterval(() => void refresh(), RECHECK_MS);
    return () => clearInterval(timer);
  }, [state.status, refresh]);

  return { state, files, refresh };
}
