/** Opens IndexedDB database `name` (version 1), made with the one object store `store`. */
export function openStoreDb(name: string, store: string, options?: IDBObjectStoreParameters): Promise<IDBDatabase> {
  const r = indexedDB.open(name, 1);
  r.onupgradeneeded = () => r.result.createObjectStore(store, options);
  return request(r);
}

/** An IndexedDB request as a promise: its result, or its error. */
export function request<T>(r: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
}
