/**
 * Messages between the page and a vault worker (vault-worker.ts). One worker holds one open
 * vault: its sub-keys live in that worker only and go with it when the page ends the worker
 * (Lock, sign-out, the page hidden for long: VaultsPanel).
 */
import type { VaultDeletedFile, VaultFile, VaultLog } from '../../shared/src/vault/vault.ts';

export type { VaultDeletedFile, VaultFile, VaultLog };

/** What `ls` answers: the live files and the deleted ones (their history kept), in name order. */
export interface VaultListing {
  files: VaultFile[];
  deleted: VaultDeletedFile[];
}

/** Opens the worker's vault: a new one (`create`), or an existing one with its passphrase or its
 *  recovery key. `scope` names whose heads the browser remembers (the user); `device` is
 *  recorded with every version this page pushes or restores ("Chrome on Android"). */
export type VaultOpen = { scope: string; device: string } & (
  | { op: 'create'; passphrase: string }
  | { op: 'unlock'; id: string; passphrase: string }
  | { op: 'unlock'; id: string; recoveryKey: string }
);

/** `pull` without a version: the newest. `restore`: version `version` becomes the newest (a
 *  deleted file becomes live again). `rm` keeps the file's history; `mv` takes it along;
 *  `purge` forgets a deleted file with its history. `passphrase`: the open vault's new
 *  passphrase (a new keyfile for the same key). */
export type VaultRequest =
  | VaultOpen
  | { op: 'ls' }
  | { op: 'log'; name: string }
  | { op: 'push'; name: string; file: File }
  | { op: 'pull'; name: string; version?: number }
  | { op: 'restore'; name: string; version: number }
  | { op: 'rm'; name: string }
  | { op: 'purge'; name: string }
  | { op: 'mv'; from: string; to: string }
  | { op: 'passphrase'; passphrase: string };

export interface VaultOpened {
  id: string;
  /** shown once, after `create` */
  recoveryKey?: string;
  /** how long the key took to derive and check (Argon2id, for a passphrase), ms */
  ms: number;
}

export interface VaultPushed {
  name: string;
  size: number;
  chunks: number;
  reused: number;
  packBytes: number;
}

/** Why a request failed: `secret` (a wrong passphrase or recovery key), `refused` (the server's
 *  head is older than the one this browser saw, or not built on it; or a damaged object), or
 *  `other` (the server refused or could not be reached). */
export type VaultFailureKind = 'secret' | 'refused' | 'other';

/**
 * A request with a body (a pack, the head, the keyfile) the vault worker asks the page to
 * send, and the page's answer: the whole response, or fetch's error. The page sends it with the
 * body as a Blob, past the service worker (sw.js's routes): Chromium keeps a request body's
 * Blob in its blob store while the service worker's FetchEvent for it lives, and the routes
 * that keep /api/ out of the service worker do not apply to a worker's requests (Chromium 156),
 * so the vault worker's own pack uploads filled the store's 2 GiB in a few pushes and then
 * failed (bench/results/vault-page.md). The body is the worker's copy.
 */
export interface VaultUpload {
  upload: number;
  url: string;
  method: string;
  headers: [string, string][];
  body: Uint8Array<ArrayBuffer>;
}
export type VaultUploaded = { uploaded: number; ok: true; status: number; statusText: string; headers: [string, string][]; body: ArrayBuffer } | { uploaded: number; ok: false; error: string };

export type VaultReply =
  | VaultUpload
  | { rid: number; progress: number }
  | { rid: number; ok: true; value: unknown }
  | { rid: number; ok: false; kind: VaultFailureKind; error: string };
