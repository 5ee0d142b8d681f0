/**
 * Messages between the page and a vault worker (vault-worker.ts). One worker holds one open
 * vault: its sub-keys live in that worker only and go with it when the page ends the worker
 * (Lock, sign-out, the page hidden for long: VaultsPanel).
 */
export interface VaultFile {
  name: string;
  size: number;
  mtime: number;
}

/** Opens the worker's vault: a new one (`create`), or an existing one with its passphrase or its
 *  recovery key. `scope` names whose heads the browser remembers (the user). */
export type VaultOpen =
  | { op: 'create'; scope: string; passphrase: string }
  | { op: 'unlock'; scope: string; id: string; passphrase: string }
  | { op: 'unlock'; scope: string; id: string; recoveryKey: string };

export type VaultRequest = VaultOpen | { op: 'ls' } | { op: 'push'; name: string; file: File } | { op: 'pull'; name: string };

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

export type VaultReply =
  | { rid: number; progress: number }
  | { rid: number; ok: true; value: unknown }
  | { rid: number; ok: false; kind: VaultFailureKind; error: string };
